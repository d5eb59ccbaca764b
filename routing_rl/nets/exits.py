"""Early exits on a chain of backbone segments: the heads, the routers' descriptor, the chain.

A backbone cut into segments ``seg1 → seg2 → ... → segM`` becomes a :class:`RoutedNet` chain:
after each segment but the last, a 2-way junction whose router chooses between an exit head
(sink 0) and the next segment (sink 1). What ends the chain is either a head on the last
segment (a backbone without a classifier: :mod:`routing_rl.nets.resnet`) or the backbone's
own classifier as the last leaf (a network the user brings: :mod:`routing_rl.nets.routable`).

Each head is pool + linear (:class:`ExitHead`) and each router reads the same pooled features
(:func:`global_pool`), so a head and its router see ``C`` numbers per example, whatever the
map's size: the frozen-backbone mode caches exactly these (:mod:`routing_rl.nets.frozen`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.router import Router


def global_pool(state: torch.Tensor) -> torch.Tensor:
    """``(B, C)``: a feature map ``(B, C, ...)`` averaged over its positions; a ``(B, C)``
    state (already pooled, as in the frozen-backbone net) is returned as it is."""
    return state if state.dim() == 2 else state.flatten(2).mean(2)


class ExitHead(nn.Module):
    """An exit's classifier: global average pooling, then one linear layer to the logits."""

    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(channels, classes)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.linear(global_pool(state))


def exit_chain(segments: Sequence[tuple[nn.Module, int]], classes: int, input_shape: Sequence[int],
               classifier: nn.Module | None = None, k_cpt_input: bool = False) -> RoutedNet:
    """A chain of ``segments`` (each ``(module, channels of its output)``, in order) with an
    exit after each: nodes ``seg1..segM``; heads ``exit1..exitM`` (:class:`ExitHead`);
    with ``classifier``, a last leaf ``exit{M+1}`` that maps ``segM``'s output to logits,
    and ``segM`` is a junction too."""
    if not segments:
        raise ValueError("a chain needs at least one segment")
    nodes: dict[str, Node] = {}
    last = len(segments)
    for i, (module, channels) in enumerate(segments, start=1):
        exit_head = ExitHead(channels, classes)
        if i < last or classifier is not None:
            following = f"seg{i + 1}" if i < last else f"exit{i + 1}"
            nodes[f"seg{i}"] = Node(module, [f"exit{i}", following], Router(channels, 2, k_cpt_input), descriptor=global_pool)
        else:
            nodes[f"seg{i}"] = Node(module, [f"exit{i}"], descriptor=global_pool)
        nodes[f"exit{i}"] = Node(exit_head)
    if classifier is not None:
        nodes[f"exit{last + 1}"] = Node(classifier)
    return RoutedNet(nodes, root="seg1", input_shape=input_shape, classes=classes, k_cpt_input=k_cpt_input)
