"""A sweep on one worker process against two: the same runs, wall time side by side.

    python benchmarks/run.py --only sweep
    python benchmarks/bench_sweep.py --runs 4 --iterations 60 --rounds 2

Both modes start a fresh process per run with one intra-op thread
(:func:`routing_rl.app.sweep.run_sweep` with ``workers=1`` and ``workers=2``), so the ratio
is what running two at a time buys on this machine: about 2 on two idle cores (each run
also pays its process start, the same in both). Rounds alternate the order of the two
modes, so that load from other processes falls on both alike; the ratio is the median of
the rounds' ratios. The runs are static-3 nets on the hybrid set (``ROUTING_RL_DATA_DIR``
or ``--data-dir``), a slice of it so that data loading stays small.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from routing_rl.app.sweep import run_sweep, sweep_configs


def sweep_seconds(workers: int, logdir: Path, runs: int, iterations: int, data_dir: str | None) -> float:
    configs = sweep_configs([], [], seeds=range(runs), static_columns=[3], preset="quick", iterations=iterations,
                            eval_every=iterations, checkpoint_every=iterations, batch_size=64, train_examples=4096,
                            eval_examples=512, data_dir=data_dir, device="cpu", logdir=str(logdir))
    start = time.perf_counter()
    run_sweep(configs, lambda line: None, workers=workers)
    return time.perf_counter() - start


def run(device: torch.device, runs: int = 4, iterations: int = 60, rounds: int = 2, data_dir: str | None = None) -> dict:
    if device.type != "cpu":
        raise ValueError("the sweep benchmark times CPU worker processes; run it with --device cpu")
    seconds = {1: [], 2: []}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as scratch:
        for round_ in range(rounds):
            for workers in ((1, 2) if round_ % 2 == 0 else (2, 1)):
                logdir = Path(scratch) / f"round{round_}-workers{workers}"
                seconds[workers].append(sweep_seconds(workers, logdir, runs, iterations, data_dir))
    ratios = [one / two for one, two in zip(seconds[1], seconds[2])]
    return {
        "runs": runs,
        "iterations": iterations,
        "workers1_seconds": statistics.median(seconds[1]),
        "workers2_seconds": statistics.median(seconds[2]),
        "workers2_speedup": statistics.median(ratios),
        "speedups_by_round": ratios,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    print(json.dumps(run(torch.device("cpu"), args.runs, args.iterations, args.rounds, args.data_dir), indent=2))
