"""Where one training step's time goes: step time with and without a device synchronisation
per step, and the operators that take it (torch.profiler), for static-8 and the actor chain.

On a GPU a step of these small nets is bound by the host launching kernels, not by the
kernels: the per-step figures say how many operators a step launches and what each costs on
the host, the synchronised / unsynchronised ratio how much of the step the GPU hides.

    python benchmarks/profile_step.py --device cuda --steps 50 [--compile] [--cudnn-benchmark]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.autograd import DeviceType
from bench_learners import ACCELERATED_CASES, _batch, _learner
from timing import sync


def profile(device: torch.device, name: str, steps: int, compile: bool, rows: int) -> dict:
    learner = _learner(device, **ACCELERATED_CASES[name], compile=compile)
    batch = _batch(device)
    for iteration in range(3):
        learner.train_step(batch, iteration)
    synced = []
    for iteration in range(steps):
        sync(device)
        start = time.perf_counter()
        learner.train_step(batch, iteration)
        sync(device)
        synced.append(time.perf_counter() - start)
    sync(device)
    start = time.perf_counter()
    for iteration in range(steps):
        learner.train_step(batch, iteration)
    sync(device)
    free_running = (time.perf_counter() - start) / steps
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as profiler:
        for iteration in range(5):
            learner.train_step(batch, iteration)
        sync(device)
    averages = profiler.key_averages()
    aten = [e for e in averages if e.key.startswith("aten::")]
    table = averages.table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=48)
    return {
        "step_seconds_synchronised": statistics.median(synced),
        "step_seconds_free_running": free_running,
        "aten_calls_per_step": sum(e.count for e in aten) / 5,
        # kernels only: an operator's self device time repeats its kernels'
        "device_seconds_per_step": sum(e.self_device_time_total for e in averages if e.device_type == DeviceType.CUDA) / 5e6
        if device.type == "cuda" else None,
        "table": table,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--cudnn-benchmark", action="store_true")
    parser.add_argument("--rows", type=int, default=15, help="operators in each table")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    device = torch.device(args.device)
    results = {name: profile(device, name, args.steps, args.compile, args.rows) for name in ACCELERATED_CASES}
    for name, result in results.items():
        print(f"## {name} ({device}, compile={args.compile}, cudnn.benchmark={args.cudnn_benchmark})\n{result.pop('table')}")
    print(json.dumps({"device": str(device), "compile": args.compile, "cudnn_benchmark": args.cudnn_benchmark, **results}, indent=1))


if __name__ == "__main__":
    main()
