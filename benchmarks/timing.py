"""Wall-clock helpers shared by the benchmarks: device syncs and medians after warm-up."""

from __future__ import annotations

import statistics
import time

import torch


def sync(device: torch.device) -> None:
    """Wait for queued CUDA work, so a timer measures it; a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device: torch.device, repeats: int, warmup: int = 2) -> float:
    """Median wall time of ``fn()`` over ``repeats`` calls, after ``warmup`` unmeasured ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)
