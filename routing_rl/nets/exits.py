"""Early exits on a chain of backbone segments: the heads, the routers' descriptor, the chain.

A backbone cut into segments ``seg1 → seg2 → ... → segM`` becomes a :class:`RoutedNet` chain:
after each segment but the last, a 2-way junction whose router chooses between an exit head
(sink 0) and the next segment (sink 1). What ends the chain is either a head on the last
segment (a backbone without a classifier: :mod:`routing_rl.nets.resnet`) or the backbone's
own classifier as the last leaf (a network the user brings: :mod:`routing_rl.nets.routable`).

Each head is pool + linear (:class:`ExitHead`): by default it reads the map's global
average, ``C`` numbers per example whatever its size; with ``grid=G`` the early heads average a
``G × G`` grid of positions instead, ``C·G²`` numbers (:class:`GridPool`). Each router reads
the mean of its head's cells (:class:`CellMean`): the global average, ``C`` numbers, at every
grid. The frozen-backbone mode caches the heads' cells (:mod:`routing_rl.nets.frozen`), from
which the routers' input follows.

Why a grid for the heads: a global average keeps what a map holds and forgets where. Later
layers read an early map through its layout, so one linear layer on its global average
classifies poorly, and on a grid of averages far better, for a few thousand more MACs per head.
Why not for the routers: a router does not classify, it judges whether stopping here pays,
which the head's confidence (``--exit-confidence``) and the global average say with ``G²``
times fewer inputs to fit to the backbone's training images. Routers reading all ``C·G²``
cells routed test images worse than the heads' confidence thresholds at the same MACs;
routers reading the global average routed as well as the thresholds or better (both measured
in ``docs/results/own-network.md``). The deepest head stays a global average: it is the
backbone's own classifier, so the plain network is the chain's deepest path at every grid.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.router import Router


class GridPool:
    """``(B, C·G²)``: a feature map ``(B, C, H, W)`` averaged over a ``G × G`` grid of its
    positions (``torch.nn.functional.adaptive_avg_pool2d``), channel-major; ``G = 1`` averages
    a map of any rank ``(B, C, ...)`` over all its positions and returns a ``(B, C)`` state
    (already pooled, as a segment that ends in a vector gives) as it is."""

    def __init__(self, grid: int = 1):
        if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
            raise ValueError(f"grid is the side of the grid an exit averages a map over (1 = global), got {grid!r}")
        self.grid = grid

    def width(self, channels: int) -> int:
        """Numbers per example for a map of ``channels`` channels."""
        return channels * self.grid**2

    def __call__(self, state: torch.Tensor) -> torch.Tensor:
        if self.grid == 1:
            return state if state.dim() == 2 else state.flatten(2).mean(2)
        if state.dim() != 4:
            raise ValueError(f"a {self.grid}×{self.grid} grid exit reads (B, C, H, W) maps, got a state of shape "
                             f"{tuple(state.shape)}; use grid=1 where a segment ends in a vector")
        return F.adaptive_avg_pool2d(state, self.grid).flatten(1)


global_pool = GridPool(1)
"""The global average: the deepest head's pooling, and every exit's by default."""


class CellMean:
    """``(B, C)``: the mean of a map's ``G × G`` cell averages (:class:`GridPool`), which is
    its global average where ``G`` divides its sides; what a router on a grid exit reads.
    Taken from the cells rather than the map so that a frozen backbone's cache, which holds
    the cells, gives the routers exactly their input."""

    def __init__(self, grid: int = 1):
        self.cells = GridPool(grid)

    def __call__(self, state: torch.Tensor) -> torch.Tensor:
        return self.of_cells(self.cells(state))

    def of_cells(self, cells: torch.Tensor) -> torch.Tensor:
        """``(B, C)`` from ``(B, C·G²)`` cell averages, channel-major."""
        return cells if self.cells.grid == 1 else cells.view(cells.shape[0], -1, self.cells.grid**2).mean(2)


class ExitHead(nn.Module):
    """An exit's classifier: average pooling (global, or over a ``grid × grid`` grid), then one
    linear layer to the logits."""

    def __init__(self, channels: int, classes: int, grid: int = 1):
        super().__init__()
        self.pool = GridPool(grid)
        self.linear = nn.Linear(self.pool.width(channels), classes)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.linear(self.pool(state))


def exit_chain(segments: Sequence[tuple[nn.Module, int]], classes: int, input_shape: Sequence[int],
               classifier: nn.Module | None = None, k_cpt_input: bool = False, grid: int = 1) -> RoutedNet:
    """A chain of ``segments`` (each ``(module, channels of its output)``, in order) with an
    exit after each: nodes ``seg1..segM``; heads ``exit1..exitM`` (:class:`ExitHead`);
    with ``classifier``, a last leaf ``exit{M+1}`` that maps ``segM``'s output to logits,
    and ``segM`` is a junction too. ``grid``: each junction's head reads its map averaged over
    a ``grid × grid`` grid, its router the mean of those cells (:class:`CellMean`); a last head
    on ``segM`` (no ``classifier``) reads the global average."""
    if not segments:
        raise ValueError("a chain needs at least one segment")
    router_input = CellMean(grid)
    nodes: dict[str, Node] = {}
    last = len(segments)
    for i, (module, channels) in enumerate(segments, start=1):
        if i < last or classifier is not None:
            exit_head = ExitHead(channels, classes, grid)
            following = f"seg{i + 1}" if i < last else f"exit{i + 1}"
            router = Router(channels, 2, k_cpt_input)
            nodes[f"seg{i}"] = Node(module, [f"exit{i}", following], router, descriptor=router_input)
        else:
            exit_head = ExitHead(channels, classes)
            nodes[f"seg{i}"] = Node(module, [f"exit{i}"], descriptor=global_pool)
        nodes[f"exit{i}"] = Node(exit_head)
    if classifier is not None:
        nodes[f"exit{last + 1}"] = Node(classifier)
    return RoutedNet(nodes, root="seg1", input_shape=input_shape, classes=classes, k_cpt_input=k_cpt_input)
