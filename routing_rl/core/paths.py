"""Probabilities of reaching every node, from the probabilities of each junction's decisions.

The probability that the training policy routes an example through a node is the product of
the probabilities of the decisions on the node's path (``net.path``). With all junctions'
probabilities side by side, ``(B, S)`` for ``S`` sinks in total, that product for every node
at once is ``exp(log p @ M)``, where ``M (S, N)`` marks which decisions lie on each node's
path: one matrix product, no loop over paths. The probabilities are floored
(:func:`routing_rl.core.policies.floored`), so the logarithm is finite.
"""

from __future__ import annotations

from itertools import pairwise

import torch

from routing_rl.core.graph import RoutedNet


class Paths:
    """Reach probabilities of ``net``'s nodes (columns in ``net.order``).

    Attributes:
        node_index: node name -> column in the reach matrix.
        leaf_columns: ``(L,)`` columns of the leaves, in ``net.leaves`` order.
    """

    def __init__(self, net: RoutedNet):
        self.junctions = list(net.junctions)
        self.node_index = {name: k for k, name in enumerate(net.order)}
        offset, slot = 0, {}
        for name in self.junctions:
            slot[name] = offset
            offset += len(net.nodes[name].sinks)
        on_path = torch.zeros(offset, len(net.order))
        for name, k in self.node_index.items():
            for junction, sink in _decisions_to(net, name):
                on_path[slot[junction] + sink, k] = 1.0
        self.sink_counts = [len(net.nodes[name].sinks) for name in self.junctions]
        device = net.leaf_macs.device
        self.on_path = on_path.to(device)
        self.leaf_columns = torch.tensor([self.node_index[leaf] for leaf in net.leaves], device=device)
        self._continues = {}
        for name in self.junctions:
            on = torch.tensor([0.0 if net.nodes[sink].is_leaf else 1.0 for sink in net.nodes[name].sinks], device=device)
            self._continues[name] = on if on.any() else torch.ones_like(on)  # only exits: each is a deepest end

    def leaves_below(self) -> dict[str, torch.Tensor]:
        """Junction name -> ``(n_sinks,)`` the number of leaves below each of its sinks."""
        below = self.on_path.index_select(1, self.leaf_columns).sum(1)
        return dict(zip(self.junctions, below.split(self.sink_counts)))

    def continuing_sinks(self) -> dict[str, torch.Tensor]:
        """Junction name -> ``(n_sinks,)`` 1 for each sink that leads on to a column, 0 for an exit
        (all 1 at a junction whose sinks are all exits)."""
        return dict(self._continues)

    def reach(self, probabilities: dict[str, torch.Tensor]) -> torch.Tensor:
        """``(B, N)`` probability of reaching each node, from junction name -> ``(B, n_sinks)``.

        Differentiable in ``probabilities``.
        """
        if not self.junctions:
            raise ValueError("this net has no junctions: every example reaches every node")
        log_p = torch.cat([probabilities[name] for name in self.junctions], dim=1).log()
        return (log_p @ self.on_path.to(log_p.dtype)).exp()

    def leaves(self, reach: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` the columns of ``reach`` that belong to leaves: path probabilities."""
        return reach.index_select(1, self.leaf_columns)

    def visited(self, visits: dict[str, torch.Tensor], batch_size: int, dtype=torch.float32) -> torch.Tensor:
        """``(B, N)`` 0/1: which node each example's routed path went through."""
        reached = torch.zeros(batch_size, len(self.node_index), dtype=dtype, device=self.on_path.device)
        for name, index in visits.items():
            reached[index, self.node_index[name]] = 1.0
        return reached


def _decisions_to(net: RoutedNet, name: str) -> list[tuple[str, int]]:
    """The (junction, sink) decisions on the path from the root to any node (``net.path``
    holds them for leaves only)."""
    decisions = []
    nodes = net.nodes_to(name)
    for parent, child in pairwise(nodes):
        if net.nodes[parent].is_junction:
            decisions.append((parent, net.nodes[parent].sinks.index(child)))
    return decisions
