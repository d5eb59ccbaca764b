"""A measured-latency cost model: each node's time on the device that will run inference.

:func:`profile_latency` times every node's transform and router as routed execution runs
them (eval mode, no gradients, the node's input at ``batch_size`` examples): after
``warmup`` rounds, ``repeats`` rounds in which every node is timed once in tree order, so
that load from other processes falls on all nodes alike; a node's time is the median over
rounds, divided by ``batch_size`` (seconds per example).

:func:`latency_cost` turns a profile into a :class:`~routing_rl.core.k_cpt.CostModel` in
**MAC-equivalents**: ``seconds × (full MACs / full seconds)``, the full net's MACs per second
of the full net's measured time. The whole net then costs as many MAC-equivalents as it has
MACs, so ``k_cpt`` keeps its meaning and its values (the paper's 0 … 6.4e-8, as the routers
read them) while the routers trade error against seconds: a node that is slow for its MACs
(small convolutions, overhead-bound layers at small batches) costs more than its MACs, a
fast one less. ``k_cpt`` per second is ``k_cpt × full MACs / full seconds`` (the profile's
``mac_equivalents_per_second``).
"""

from __future__ import annotations

import math
import statistics
import time

import torch

from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel
from routing_rl.core.seeds import seeded_generator

UNIT = "MAC-equivalents"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def profile_latency(net: RoutedNet, batch_size: int, warmup: int = 3, repeats: int = 15, seed: int = 0) -> dict:
    """Seconds per example of every node's transform and router at ``batch_size``, on the
    net's device with the current thread count; a JSON-ready dict (see the module docstring).
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"the latency batch size must be a positive integer, got {batch_size!r}")
    if warmup < 0 or repeats < 1:
        raise ValueError(f"need warmup >= 0 and repeats >= 1, got {warmup} and {repeats}")
    device = net.leaf_macs.device
    dtype = next(net.parameters()).dtype
    generator = seeded_generator(seed)
    x = torch.rand(batch_size, *net.input_shape, generator=generator).to(device=device, dtype=dtype)
    k_cpt = torch.zeros(batch_size, dtype=dtype, device=device) if net.k_cpt_input else None
    was_training = net.training
    net.eval()
    try:
        inputs, states = {net.root: x}, {}
        for name in net.order:  # every node's input, as routed execution hands it over
            node = net.nodes[name]
            states[name] = node.transform(inputs[name])
            for sink in node.sinks:
                inputs[sink] = net.nodes[sink].reads(states[name])
        times = {name: {"transform": [], "router": []} for name in net.order}
        for round_ in range(warmup + repeats):
            for name in net.order:
                node = net.nodes[name]
                parts = {"transform": lambda: node.transform(inputs[name])}
                if node.router is not None:
                    parts["router"] = lambda: node.router(node.router_input(states[name]), k_cpt)
                for part, run in parts.items():
                    _sync(device)
                    start = time.perf_counter()
                    run()
                    _sync(device)
                    if round_ >= warmup:
                        times[name][part].append(time.perf_counter() - start)
    finally:
        net.train(was_training)
    seconds = {
        name: {part: statistics.median(values) / batch_size if values else 0.0 for part, values in parts.items()}
        for name, parts in times.items()
    }
    full_seconds = sum(s["transform"] + s["router"] for s in seconds.values())
    return {
        "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
        "warmup": warmup,
        "repeats": repeats,
        "seconds": seconds,
        "full_seconds": full_seconds,
        "full_macs": net.full_macs,
        "mac_equivalents_per_second": net.full_macs / full_seconds,
    }


def check_profile(profile) -> None:
    """ValueError naming what makes ``profile`` not a :func:`profile_latency` result: its
    ``seconds`` must map each node to its ``transform`` and ``router`` times, finite and >= 0."""
    seconds = profile.get("seconds") if isinstance(profile, dict) else None
    if not isinstance(seconds, dict):
        raise ValueError("it is not a latency profile (no \"seconds\" of each node)")
    for name, parts in seconds.items():
        if not isinstance(parts, dict):
            raise ValueError(f"its times of node {name!r} are {parts!r:.40}, not a transform and a router time")
        for part in ("transform", "router"):
            value = parts.get(part)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"its {part} time of node {name!r} is {value!r:.40}, not a number of seconds >= 0")


def latency_cost(net: RoutedNet, profile: dict) -> CostModel:
    """The cost model of a :func:`profile_latency` profile: each node's transform and router
    time in MAC-equivalents (``seconds × full MACs / full seconds``). ValueError for a profile
    that is not one (:func:`check_profile`) or lacks one of the net's nodes."""
    try:
        check_profile(profile)
    except ValueError as error:
        raise ValueError(f"the latency profile is malformed: {error}; profile this net again") from None
    seconds = profile["seconds"]
    missing = [name for name in net.order if name not in seconds]
    if missing:
        raise ValueError(f"the latency profile has no time for {', '.join(missing)}; profile this net again")
    total = sum(seconds[name]["transform"] + seconds[name]["router"] for name in net.order)
    if not total > 0:
        raise ValueError("the latency profile's times sum to zero; profile again with more repeats or a larger batch")
    scale = net.full_macs / total
    node_cost = {name: (seconds[name]["transform"] + seconds[name]["router"]) * scale for name in net.order}
    return CostModel(net, node_cost, unit=UNIT, profile=profile)
