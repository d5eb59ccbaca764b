"""Oracle routing: the least any router could spend on a net for a given accuracy.

A full evaluation tells which heads classify each example correctly (``correct (B, L)``).
A router that knew it would send every example it can get right to its cheapest correct
leaf, and every other one to the net's cheapest leaf. To spend less, it gives up the
examples whose cheapest correct leaf costs the most over the cheapest leaf: every example
counts the same, so keeping the cheapest ones first is optimal at every accuracy.

That order depends on the cost model only through the order it puts the leaves in. Two
cost models that rank the leaves alike (as MACs and measured time do on a chain, where a
deeper exit costs more either way) give the same oracle routing at every accuracy, and so
the same oracle accuracy/time frontier: there, a cost model can change what trained routers
learn, not what the best routing is. On the paper's tree, whose branches are copies, the
same holds up to ties between equally deep leaves, which the two may break differently.
"""

from __future__ import annotations

import torch

from routing_rl.core.execution import Decide, Junction, full
from routing_rl.core.graph import RoutedNet


@torch.no_grad()
def leaf_correct(net: RoutedNet, images: torch.Tensor, labels: torch.Tensor, k_cpt=None, batch_size: int = 500) -> torch.Tensor:
    """``(B, L)`` bool: whether each leaf's head (in ``net.leaves`` order) classifies each
    example correctly, from full evaluations in batches of ``batch_size``."""
    rows = []
    for first in range(0, len(images), batch_size):
        logits = full(net, images[first : first + batch_size], k_cpt).logits
        predictions = torch.stack([logits[leaf].argmax(1) for leaf in net.leaves], dim=1)
        rows.append(predictions == labels[first : first + batch_size, None].to(predictions.device))
    return torch.cat(rows)


def _extra_costs(correct: torch.Tensor, leaf_cost: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's cheapest correct leaf ``(B,)`` (the cheapest leaf where none is correct)
    and what it costs over the cheapest leaf ``(B,)`` (inf where none is correct)."""
    leaf_cost = leaf_cost.to(device=correct.device, dtype=torch.float64)
    if correct.dim() != 2 or correct.shape[1] != leaf_cost.numel():
        raise ValueError(f"correct must be (examples, {leaf_cost.numel()} leaves), got {tuple(correct.shape)}")
    masked = torch.where(correct, leaf_cost, torch.inf)
    cost, leaf = masked.min(1)
    cheapest = leaf_cost.argmin()
    return torch.where(cost.isfinite(), leaf, cheapest), cost - leaf_cost[cheapest]


def oracle_leaves(correct: torch.Tensor, leaf_cost: torch.Tensor, right: int) -> torch.Tensor:
    """``(B,)`` the leaf of each example in the cheapest routing that classifies at least
    ``right`` examples correctly (exactly ``right``, unless more are right at the cheapest
    leaf anyway)."""
    leaf, extra = _extra_costs(correct, leaf_cost)
    reachable = int(extra.isfinite().sum())
    if not 0 <= right <= reachable:
        raise ValueError(f"no routing gets {right} examples right: between 0 and {reachable} (those some head classifies correctly)")
    kept = torch.zeros_like(leaf, dtype=torch.bool)
    kept[extra.argsort(stable=True)[:right]] = True
    return torch.where(kept, leaf, int(leaf_cost.argmin()))


class PathPolicy:
    """Routing that sends each example to a leaf chosen in advance (the oracle's, say).

    ``route(net, x, PathPolicy(net).decide(leaf))`` sends the batch's example ``i`` to leaf
    ``leaf[i]`` (``(B,)``, an index into ``net.leaves``): at each junction, the sink on the
    path to that leaf. The routers still run, as they would for a router that chose so.
    """

    def __init__(self, net: RoutedNet):
        device = net.leaf_macs.device
        self.sink_to = {name: torch.full((len(net.leaves),), -1, dtype=torch.int64, device=device) for name in net.junctions}
        for number, name in enumerate(net.leaves):
            for junction, sink in net.path[name]:
                self.sink_to[junction][number] = sink

    def decide(self, leaf: torch.Tensor) -> Decide:
        def decide(junction: Junction) -> torch.Tensor:
            return self.sink_to[junction.name][leaf[junction.index]]

        return decide
