"""Throughput of the routing environments against the net's plain batched forward.

``vecenv_throughput_ratio`` = MACs executed per second while stepping the SB3 vector env
(chain net, 256 examples in flight, uniformly random actions, eval mode: environment steps
only, no learning) / MACs per second of the same net's full forward at batch 256. MACs, not
examples: random routing exits early half the time at each junction, and counting examples
would let those cheap episodes flatter the figure. Executed MACs are counted with forward
hooks on the transforms the env actually runs (the routers the agent stands in for are not
run, so not counted); the full forward runs every transform and router.
``single_env_throughput_ratio`` is the same figure for the one-example Gymnasium env.

Target: ``vecenv_throughput_ratio >= 0.3``.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from routing_rl.envs.routing_env import RoutingEnv
from routing_rl.envs.sb3_vec_env import RoutingSB3VecEnv
from timing import sync

from routing_rl.data import RoutingDataset, Split
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
    return RoutingDataset("synthetic", tuple(str(c) for c in range(CLASSES)), split, split, {})


def _seconds(fn, device: torch.device, calls: int) -> float:
    sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return time.perf_counter() - start


def run(device: torch.device, num_envs: int = 256, rounds: int = 7, steps: int = 12, single_steps: int = 40) -> dict:
    """Rounds interleave the full forward with each env, so that both see the same machine
    load (the CPUs may be shared); each figure is the median over rounds."""
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
    result["target"] = "vecenv_throughput_ratio >= 0.3"
    return result
