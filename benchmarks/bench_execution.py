"""Dynamic execution against full evaluation, side by side on one chain net.

The chain's routers are set so that about half the examples exit after column 1, a quarter
after column 3 and the rest run to the end. Three numbers come out:

* ``mac_ratio`` — MACs of full evaluation / mean MACs of dynamic execution;
* ``ideal_speedup`` — full wall time / the time perfect skipping would take: each node's
  measured time in full evaluation, weighted by the fraction of examples routed through it;
* ``dynamic_speedup`` — full wall time / dynamic execution's wall time.

Wall time is not proportional to MACs (early columns are memory-bound), so the target is
``dynamic_speedup >= 0.9 × ideal_speedup``: what dynamic execution controls is its own
overhead (gathers, routing, bookkeeping).
"""

from __future__ import annotations

import statistics
import time

import torch
from timing import median_seconds, sync

from routing_rl.core.execution import dynamic, full
from routing_rl.nets.multiscale import chain

EXIT_FRACTIONS = {"col1": 0.5, "col3": 0.5}
"""Junction -> fraction of the examples reaching it that exit there; other junctions continue."""


@torch.no_grad()
def set_exit_fractions(net, x: torch.Tensor, fractions: dict[str, float], seed: int = 0) -> None:
    """Point each 2-way router at a data-dependent split: for the examples that reach junction
    j, a random projection of the router's hidden features decides, exiting for the top
    ``fractions[j]`` of them; junctions not named always continue (sink 1)."""
    generator = torch.Generator().manual_seed(seed)
    for name in net.junctions:
        last = net.nodes[name].router.layers[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, 1.0]))
        if name in fractions:
            last.weight[0] = torch.randn(last.in_features, generator=generator)
    for name in fractions:
        reached = dynamic(net, x).visits[name]
        exit_score = full(net, x[reached]).scores[name][:, 0]
        net.nodes[name].router.layers[-1].bias[0] = 1.0 - torch.quantile(exit_score, 1.0 - fractions[name])


def _node_seconds(net, execute, device: torch.device, repeats: int) -> dict[str, float]:
    """Median wall time of each node (transform and router) inside one call of ``execute``."""
    samples: dict[str, list[float]] = {name: [] for name in net.order}
    started: dict[str, float] = {}

    def before(name):
        def hook(module, args):
            sync(device)
            started[name] = time.perf_counter()
        return hook

    def after(name):
        def hook(module, args, output):
            sync(device)
            samples[name].append(time.perf_counter() - started[name])
        return hook

    handles = []
    for name in net.order:
        handles.append(net.nodes[name].register_forward_pre_hook(before(name)))
        handles.append(net.nodes[name].register_forward_hook(after(name)))
    try:
        with torch.no_grad():
            for _ in range(repeats):
                execute()
    finally:
        for handle in handles:
            handle.remove()
    return {name: statistics.median(times[1:] or times) for name, times in samples.items() if times}


def run(device: torch.device, batch_size: int = 1024, repeats: int = 7) -> dict:
    torch.manual_seed(0)
    net = chain().to(device).eval()
    x = torch.rand(batch_size, 3, 32, 32, device=device)
    set_exit_fractions(net, x, EXIT_FRACTIONS)
    routed = dynamic(net, x)
    fraction_through = {name: routed.visits.get(name, x[:0, 0, 0, 0]).numel() / batch_size for name in net.order}
    exits = torch.bincount(routed.leaf, minlength=len(net.leaves)).tolist()

    with torch.no_grad():
        full_seconds = median_seconds(lambda: full(net, x), device, repeats)
    dynamic_seconds = median_seconds(lambda: dynamic(net, x), device, repeats)
    node_seconds = _node_seconds(net, lambda: full(net, x), device, repeats)
    node_seconds_dynamic = _node_seconds(net, lambda: dynamic(net, x), device, repeats)
    ideal_seconds = sum(node_seconds[n] * fraction_through[n] for n in net.order)

    full_macs = net.full_macs
    return {
        "device": str(device),
        "batch_size": batch_size,
        "exit_fraction_by_leaf": {leaf: count / batch_size for leaf, count in zip(net.leaves, exits)},
        "full_macs_per_example": full_macs,
        "dynamic_mean_macs_per_example": routed.macs.double().mean().item(),
        "mac_ratio": full_macs / routed.macs.double().mean().item(),
        "full_seconds": full_seconds,
        "dynamic_seconds": dynamic_seconds,
        "ideal_seconds": ideal_seconds,
        "ideal_speedup": full_seconds / ideal_seconds,
        "dynamic_speedup": full_seconds / dynamic_seconds,
        "dynamic_over_ideal": ideal_seconds / dynamic_seconds,
        "target": "dynamic_speedup >= 0.9 * ideal_speedup",
        "node_seconds_full": node_seconds,
        "node_seconds_dynamic": node_seconds_dynamic,
        "node_share_of_full_time": {n: t / full_seconds for n, t in node_seconds.items()},
        "node_share_of_full_macs": {n: (net.macs[n] + net.router_macs[n]) / full_macs for n in net.order},
    }
