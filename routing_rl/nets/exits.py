"""Early exits on a chain of backbone segments: the heads, the routers' descriptor, the chain.

A backbone cut into segments ``seg1 → seg2 → ... → segM`` becomes a :class:`RoutedNet` chain:
after each segment but the last, a 2-way junction whose router chooses between an exit head
(sink 0) and the next segment (sink 1). What ends the chain is either a head on the last
segment (a backbone without a classifier: :mod:`routing_rl.nets.resnet`) or the backbone's
own classifier as the last leaf (a network the user brings: :mod:`routing_rl.nets.routable`).

Each head is pool + linear (:class:`ExitHead`) and each router reads the same pooled features
(:class:`GridPool`): by default the map's global average, ``C`` numbers per example whatever
its size; with ``grid=G`` the early exits average a ``G × G`` grid of positions instead,
``C·G²`` numbers. The frozen-backbone mode caches exactly these (:mod:`routing_rl.nets.frozen`).

Why a grid: a global average keeps what a map holds and forgets where. Later layers read an
early map through its layout, so one linear layer on its global average classifies poorly,
and on a grid of averages far better, for a few thousand more MACs per head (measured in
``docs/results/own-network.md``). The deepest head stays a global average: it is the
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
    and ``segM`` is a junction too. ``grid``: each junction's head and router read its map
    averaged over a ``grid × grid`` grid; a last head on ``segM`` (no ``classifier``) reads the
    global average."""
    if not segments:
        raise ValueError("a chain needs at least one segment")
    pool = GridPool(grid)
    nodes: dict[str, Node] = {}
    last = len(segments)
    for i, (module, channels) in enumerate(segments, start=1):
        if i < last or classifier is not None:
            exit_head = ExitHead(channels, classes, grid)
            following = f"seg{i + 1}" if i < last else f"exit{i + 1}"
            router = Router(pool.width(channels), 2, k_cpt_input)
            nodes[f"seg{i}"] = Node(module, [f"exit{i}", following], router, descriptor=pool)
        else:
            exit_head = ExitHead(channels, classes)
            nodes[f"seg{i}"] = Node(module, [f"exit{i}"], descriptor=global_pool)
        nodes[f"exit{i}"] = Node(exit_head)
    if classifier is not None:
        nodes[f"exit{last + 1}"] = Node(classifier)
    return RoutedNet(nodes, root="seg1", input_shape=input_shape, classes=classes, k_cpt_input=k_cpt_input)
