"""Wall-clock helpers shared by the benchmarks: device syncs, medians after warm-up, and
interleaved timing of alternatives."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    """Wait for queued CUDA work, so a timer measures it; a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device: torch.device, repeats: int, warmup: int = 2, clock=time.perf_counter) -> float:
    """Median time of ``fn()`` over ``repeats`` calls, after ``warmup`` unmeasured ones; wall
    time unless another ``clock`` is given (see :func:`interleaved_seconds` on CPU time)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = clock()
        fn()
        sync(device)
        times.append(clock() - start)
    return statistics.median(times)


def interleaved_seconds(fns: dict[str, Callable[[], object]], device: torch.device, repeats: int,
                        warmup: int = 1) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds of each ``fn()`` in each of ``repeats`` rounds.

    A round calls every function once, starting one further along each round, so that load
    from other processes falls on all of them alike and none always runs right after the
    same neighbour (whose caches and freed memory it would inherit). Compare two functions
    by the median over rounds of their ratio within a round. The CPU time
    (``time.process_time``) counts only the time this process ran: on a crowded CPU, with one
    intra-op thread, it leaves out the waits for a core that make wall times noisy. (On
    CUDA it misses the device's work; use the wall times there.)
    """
    names = list(fns)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(repeats):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            sync(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            fns[name]()
            sync(device)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return wall, cpu


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over rounds of ``numerator[i] / denominator[i]``."""
    return statistics.median(a / b for a, b in zip(numerator, denominator))


def ratio_range(numerator: list[float], denominator: list[float]) -> list[float]:
    """``[lowest, highest]`` of the per-round ratios."""
    ratios = [a / b for a, b in zip(numerator, denominator)]
    return [min(ratios), max(ratios)]
