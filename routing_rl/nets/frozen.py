"""A routed chain whose backbone is frozen, run on its cached exit features.

When only the exit heads and routers learn, every example's backbone outputs are the same at
every step, so they are computed once (:func:`exit_features`) and kept: per example, the pooled
features each junction's head reads (:class:`~routing_rl.nets.exits.GridPool`; its router reads
their :class:`~routing_rl.nets.exits.CellMean`) and the last leaf's logits, side by side in one
vector. :func:`frozen_net` is the same chain on
those vectors: each backbone node becomes a :class:`CachedSegment` that hands the vector on and
costs the MACs the segment it stands for costs (so every path's MACs are the backbone's), each
head reads its junction's slice through the **same** linear layer as the full net's head, and
the routers are the full net's own modules. Training the frozen net therefore trains the full
net's heads and routers in place, and a frozen run's checkpoint loads into the full net
(:func:`attach`).

Nets it takes: chains whose heads are :class:`~routing_rl.nets.exits.ExitHead` and whose
routers read a :class:`~routing_rl.nets.exits.CellMean` of their cells — :mod:`routing_rl.nets.resnet` and
:func:`~routing_rl.nets.routable.routable` nets; others are refused with one line.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.exits import CellMean, ExitHead


class Slice:
    """``state[:, start:stop]``: the part of a cached feature vector one head or router reads."""

    def __init__(self, start: int, stop: int):
        self.start, self.stop = start, stop

    def __call__(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, self.start : self.stop]


class CellOfSlice:
    """A router's input from its junction's cached cells: the full net's
    :class:`~routing_rl.nets.exits.CellMean` of ``part``."""

    def __init__(self, cell_mean: CellMean, part: Slice):
        self.cell_mean, self.part = cell_mean, part

    def __call__(self, state: torch.Tensor) -> torch.Tensor:
        return self.cell_mean.of_cells(self.part(state))


class CachedSegment(nn.Module):
    """A frozen backbone node: hands its input on (all of it, or ``part``: the cached logits
    at the last leaf) and costs ``macs`` per example, what the node it stands for costs."""

    def __init__(self, macs: int, part: Slice | None = None):
        super().__init__()
        self.macs = int(macs)
        self.part = part

    def extra_macs(self, inputs, output) -> int:
        return self.macs

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return state if self.part is None else self.part(state)


class CachedHead(nn.Module):
    """An exit head on its junction's cached pooled features: the full head's linear layer."""

    def __init__(self, linear: nn.Linear, part: Slice):
        super().__init__()
        self.linear = linear
        self.part = part

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.linear(self.part(state))


def backbone_nodes(net: RoutedNet) -> list[str]:
    """The frozen nodes: the path to the deepest leaf. Refuses a net frozen mode cannot cache."""
    deepest = net.leaves[-1]
    path = net.nodes_to(deepest)
    if net.exit_confidence or net.junctions != path[: len(net.junctions)] or len(net.leaves) != len(net.junctions) + 1:
        raise ValueError("frozen-backbone mode takes a chain of exits without --exit-confidence (resnetD-exits, a "
                         "routable() net); build the net plain and let the frozen net read its exits' confidence")
    for junction in net.junctions:
        node = net.nodes[junction]
        heads = [sink for sink in node.sinks if net.nodes[sink].is_leaf and sink != deepest]
        if not isinstance(node.descriptor, CellMean) or len(heads) != 1 or not isinstance(net.nodes[heads[0]].transform, ExitHead):
            raise ValueError(f"junction {junction!r} is not an exit of pool + linear head (routing_rl.nets.exits); "
                             "frozen-backbone mode caches the pooled features such heads read, and their routers' input follows")
    return path


def feature_width(net: RoutedNet) -> int:
    """Numbers cached per example: each junction's pooled features, then the classes."""
    backbone_nodes(net)
    return sum(_head(net, j).linear.in_features for j in net.junctions) + net.classes


def _head(net: RoutedNet, junction: str) -> ExitHead:
    """The junction's exit head (the deepest leaf is the backbone's)."""
    return next(net.nodes[s].transform for s in net.nodes[junction].sinks if net.nodes[s].is_leaf and s != net.leaves[-1])


@torch.no_grad()
def exit_features(net: RoutedNet, images: torch.Tensor, batch_size: int = 500) -> torch.Tensor:
    """``(N, feature_width(net))`` float32: each image's pooled features at every junction (what
    its head reads) and the deepest leaf's logits, from ``net`` in eval mode (the backbone as it
    will stay)."""
    path = backbone_nodes(net)
    junctions = set(net.junctions)
    device = net.leaf_macs.device
    was_training = net.training
    net.eval()
    chunks = []
    try:
        for start in range(0, len(images), batch_size):
            state, features = images[start : start + batch_size].to(device), []
            for name in path:
                state = net.nodes[name].transform(net.nodes[name].reads(state))
                if name in junctions:
                    features.append(_head(net, name).pool(state))
            chunks.append(torch.cat([*features, state], 1).float().cpu())
    finally:
        net.train(was_training)
    return torch.cat(chunks) if chunks else torch.zeros(0, feature_width(net))


def frozen_net(net: RoutedNet) -> RoutedNet:
    """``net`` on cached exit features (module docstring): same node names and sinks, the same
    router and head-linear modules, input ``(feature_width(net),)``."""
    path = backbone_nodes(net)
    deepest = path[-1]
    nodes: dict[str, Node] = {}
    start = 0
    for name in path[:-1]:
        node = net.nodes[name]
        if node.is_junction:
            width = _head(net, name).linear.in_features
            part = Slice(start, start + width)
            start += width
            for sink in node.sinks:
                if net.nodes[sink].is_leaf and sink != deepest:
                    nodes[sink] = Node(CachedHead(net.nodes[sink].transform.linear, part))
            router_input = CellOfSlice(node.descriptor, part)
            nodes[name] = Node(CachedSegment(net.macs[name]), node.sinks, node.router, descriptor=router_input)
        else:
            nodes[name] = Node(CachedSegment(net.macs[name]), node.sinks)
    nodes[deepest] = Node(CachedSegment(net.macs[deepest], Slice(start, start + net.classes)))
    return RoutedNet(nodes, net.root, (start + net.classes,), net.classes, net.k_cpt_input)


def attach(net: RoutedNet, frozen_state: Mapping[str, torch.Tensor]) -> RoutedNet:
    """Load a frozen net's trained heads and routers (its ``state_dict``, e.g. a frozen run's
    checkpoint) into the full ``net``, whose backbone is already loaded; returns ``net``."""
    own = net.state_dict()
    unknown = [key for key in frozen_state if key not in own or own[key].shape != frozen_state[key].shape]
    if unknown:
        raise ValueError(f"{unknown[0]!r} of the frozen net's state is not this net's; attach it to the net (arch, "
                         "width, classes, k_cpt input) whose backbone it was trained on")
    net.load_state_dict(frozen_state, strict=False)
    return net
