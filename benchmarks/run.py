"""Run routing-rl's benchmarks and print their side-by-side ratios.

    python benchmarks/run.py --json bench.json            # everything, on the CPU
    python benchmarks/run.py --only execution --device cuda

Each benchmark module in this folder exposes ``run(device) -> dict``; every ratio in a
result is measured within the same run, on the same machine. A benchmark that fails (no
data found, say) is reported with its error and the others still run and are written; the
exit status is then 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

import torch

from routing_rl.core.memory import retain_freed_memory

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHMARKS = {
    "execution": "bench_execution",
    "backbone": "bench_backbone",
    "data": "bench_data",
    "learners": "bench_learners",
    "vecenv": "bench_vecenv",
    "latency": "bench_latency",
    "video": "bench_video",
    "sweep": "bench_sweep",
}


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "processor": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    parser.add_argument("--device", default="cpu", help="torch device to measure on (default: cpu)")
    args = parser.parse_args(argv)

    if torch.device(args.device).type == "cpu":
        retain_freed_memory()  # as the command-line tools do
    results = {"machine": machine()}
    failed = []
    for name in args.only or BENCHMARKS:
        start = time.perf_counter()
        try:
            results[name] = importlib.import_module(BENCHMARKS[name]).run(torch.device(args.device))
        except Exception as error:  # one benchmark's failure must not cost the others' results
            failed.append(name)
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        results[name]["benchmark_seconds"] = time.perf_counter() - start
        summary = {k: v for k, v in results[name].items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
        print(f"[{name}]")
        for key, value in summary.items():
            print(f"  {key:32s} {value:.4g}" if isinstance(value, float) else f"  {key:32s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
        print(f"wrote {args.json}")
    if failed:
        print(f"failed: {', '.join(failed)} (see their error above)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
