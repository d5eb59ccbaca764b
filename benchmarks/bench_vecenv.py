"""Throughput of the routing environments against the net's plain batched forward.

``vecenv_throughput_ratio`` = MACs executed per second while stepping the SB3 vector env
(chain net, 256 examples in flight, uniformly random actions, eval mode: environment steps
only, no learning) / MACs per second of the same net's full forward at batch 256. MACs, not
examples: random routing exits early half the time at each junction, and counting examples
would let those cheap episodes flatter the figure. Executed MACs are counted with forward
hooks on the transforms the env actually runs (the routers the agent stands in for are not
run, so not counted); the full forward runs every transform and router.
``single_env_throughput_ratio`` is the same figure for the one-example Gymnasium env.

Target: ``vecenv_throughput_ratio >= 0.6``.

``mac_mix_bound`` is the ratio the vec env would reach with no overhead at all: each column
and head timed alone at batch ``num_envs``, weighted by how often random actions reach it
(half the examples at each junction exit). Early columns do few MACs per second (column 1:
about 7% of the MACs, 30% of the time), and random routing spends most of its work there,
so this bound, not the env's bookkeeping, caps the ratio. ``mac_mix_bound_at_slot_batches``
times each column at the batch it meets in the env instead: every step moves each slot one
junction on, so of ``num_envs`` slots about half stand before column 1, a quarter before
column 2, and so on, and smaller batches do fewer MACs per second still.
``vecenv_over_bound`` = ``vecenv_throughput_ratio`` / ``mac_mix_bound_at_slot_batches``:
the share of an overhead-free env's speed that the env reaches.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from routing_rl.envs.routing_env import RoutingEnv
from routing_rl.envs.sb3_vec_env import RoutingSB3VecEnv
from timing import median_seconds, sync

from routing_rl.core.graph import take
from routing_rl.data import SOURCES, RoutingDataset, Split
from routing_rl.nets.multiscale import chain

CLASSES = 10


class ExecutedMacs:
    """Counts the MACs of every transform ``net`` runs, from each call's batch size."""

    def __init__(self, net):
        self.total = 0
        self.handles = [
            net.nodes[name].transform.register_forward_hook(self._hook(net.macs[name])) for name in net.order
        ]

    def _hook(self, macs_per_example: int):
        def hook(module, args, output):
            first = args[0]
            while not isinstance(first, torch.Tensor):
                first = first[0]
            self.total += macs_per_example * first.shape[0]
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _synthetic(examples: int, device: torch.device) -> RoutingDataset:
    generator = torch.Generator().manual_seed(0)
    split = Split(
        torch.rand(examples, 3, 32, 32, generator=generator),
        torch.randint(CLASSES, (examples,), generator=generator),
        torch.randint(2, (examples,), generator=generator),
    ).to(device)
    return RoutingDataset("synthetic", tuple(str(c) for c in range(CLASSES)), split, split, {}, SOURCES)


def _seconds(fn, device: torch.device, calls: int) -> float:
    sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return time.perf_counter() - start


@torch.inference_mode()
def mac_mix_bound(net, x: torch.Tensor, device: torch.device, repeats: int = 5, slot_batches: bool = False) -> float:
    """MACs/s of the chain's nodes, mixed as random 2-way routing reaches them, over the
    full forward's MACs/s at batch ``len(x)`` (see the module docstring). Each node is timed
    at the full batch, or with ``slot_batches`` at the batch the vec env hands it: half the
    batch at column 1, a quarter at column 2, ..., at least one example."""
    seconds, macs, reach, full_seconds = {}, {}, {}, {}
    clock = time.process_time if device.type == "cpu" else time.perf_counter  # CPU time: steadier on a shared CPU

    def per_example(fn, inputs, batch: int) -> float:
        part = take(inputs, torch.arange(batch, device=device))
        return median_seconds(lambda: fn(part), device, repeats, warmup=1, clock=clock) / batch

    state = x
    for k, name in enumerate(n for n in net.order if n.startswith("col")):
        node, head = net.nodes[name], net.nodes[head_name(name)]
        parent_state = state
        state = node(parent_state).state
        batches = [len(x)] + ([max(1, len(x) >> (k + 1))] if slot_batches else [])
        at = [per_example(node, parent_state, b) + per_example(head, state, b) for b in batches]
        full_seconds[name], seconds[name] = at[0], at[-1]
        macs[name] = net.macs[name] + net.router_macs[name] + net.macs[head_name(name)]
        reach[name] = 0.5**k
    mixed = sum(reach[n] * macs[n] for n in macs) / sum(reach[n] * seconds[n] for n in macs)
    return mixed / (sum(macs.values()) / sum(full_seconds.values()))


def head_name(column: str) -> str:
    return column.replace("col", "exit")


def run(device: torch.device, num_envs: int = 256, rounds: int = 7, steps: int = 12, single_steps: int = 40) -> dict:
    """Rounds interleave the full forward with each env, so that both see the same machine
    load (the CPUs may be shared); each figure is the median over rounds. On the CPU the
    net runs on one intra-op thread, as in the other benchmarks."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return _run(device, num_envs, rounds, steps, single_steps)
    finally:
        torch.set_num_threads(threads)


def _run(device: torch.device, num_envs: int, rounds: int, steps: int, single_steps: int) -> dict:
    torch.manual_seed(0)
    net = chain(classes=CLASSES).to(device).eval()
    dataset = _synthetic(4096, device)
    rng = np.random.default_rng(0)
    x = dataset.train.images[:num_envs]

    def full():
        with torch.no_grad():
            net(x)

    vec_env = RoutingSB3VecEnv(num_envs, dataset=dataset, net=net, train=False, seed=0)
    vec_env.reset()
    env = RoutingEnv(dataset=dataset, net=net, train=False)
    env.reset(seed=0)

    def vec_step():
        vec_env.step(rng.integers(2, size=num_envs))

    def single_step():
        if env.step(int(rng.integers(2)))[2]:
            env.reset()

    for fn, calls in ((full, 2), (vec_step, 10), (single_step, 20)):  # warm-up
        _seconds(fn, device, calls)
    counter = ExecutedMacs(net)
    rows = []
    try:
        for _ in range(rounds):
            full_seconds = _seconds(full, device, 1)
            counter.total = 0
            vec_seconds = _seconds(vec_step, device, steps)
            vec_macs = counter.total
            counter.total = 0
            single_seconds = _seconds(single_step, device, single_steps)
            single_macs = counter.total
            full_rate = net.full_macs * num_envs / full_seconds
            rows.append({
                "full_forward_seconds": full_seconds,
                "full_forward_macs_per_second": full_rate,
                "vecenv_macs_per_second": vec_macs / vec_seconds,
                "vecenv_steps_per_second": steps * num_envs / vec_seconds,
                "vecenv_mean_macs_per_step": vec_macs / (steps * num_envs),
                "vecenv_throughput_ratio": vec_macs / vec_seconds / full_rate,
                "single_env_macs_per_second": single_macs / single_seconds,
                "single_env_steps_per_second": single_steps / single_seconds,
                "single_env_throughput_ratio": single_macs / single_seconds / full_rate,
            })
    finally:
        counter.remove()
    result = {"device": str(device), "num_envs": num_envs, "rounds": rounds}
    result.update({key: float(np.median([row[key] for row in rows])) for key in rows[0]})
    result["vecenv_throughput_ratio_by_round"] = [row["vecenv_throughput_ratio"] for row in rows]
    result["mac_mix_bound"] = mac_mix_bound(net, x, device)
    result["mac_mix_bound_at_slot_batches"] = mac_mix_bound(net, x, device, slot_batches=True)
    result["vecenv_over_bound"] = result["vecenv_throughput_ratio"] / result["mac_mix_bound_at_slot_batches"]
    result["target"] = "vecenv_throughput_ratio >= 0.6"
    return result
