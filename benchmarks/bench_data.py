"""Data-layer timings: cold and cached load of each dataset, and augmentation vs a training step.

    python benchmarks/bench_data.py [--data-dir DIR] [--datasets mnist hybrid ...] > bench_data.json

``run()`` returns a dict:

- ``load[name]``: ``cold_s`` (first build into an empty cache: decoding the sources included),
  ``cached_s`` (a second load in the same process), ``cached_fresh_process_s`` (a load in a
  new Python process, imports excluded) and ``cached_first_pass_s`` (a load plus one pass over
  every pixel, which pages the memory-mapped cache in);
- ``augment``: ms per batch of 128 (CPU, and CUDA when available);
- ``train_step``: ms per SGD step of an 8-column net (batch 128) on the same device, and the
  augmentation's share of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import median_seconds

from routing_rl.data import DATASETS, SOURCES, augment, load_dataset
from routing_rl.data.datasets import PAPER_DATASETS
from routing_rl.nets.multiscale import static

REPO = Path(__file__).resolve().parents[1]
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


def default_data_dir() -> Path | None:
    if os.environ.get("ROUTING_RL_DATA_DIR"):
        return Path(os.environ["ROUTING_RL_DATA_DIR"])
    return SHARED_DATASETS if SHARED_DATASETS.is_dir() else None


def time_augment(device: torch.device, batch: int = 128) -> float:
    images = torch.rand(batch, 3, 32, 32, device=device)
    source = torch.arange(batch, device=device) % len(SOURCES)
    return 1e3 * median_seconds(lambda: augment(images, source), device, repeats=50, warmup=3)


def time_train_step(device: torch.device, batch: int = 128) -> float:
    net = static(8).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    images = torch.rand(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(images).logits["exit8"], labels).backward()
        opt.step()

    return 1e3 * median_seconds(step, device, repeats=10 if device.type == "cpu" else 50, warmup=3)


def _fresh_process_load(name: str, data_dir: Path, cache_dir: Path) -> float:
    code = (
        "import time, sys\n"
        "from routing_rl.data import load_dataset\n"
        "t = time.perf_counter()\n"
        f"load_dataset({name!r}, data_dir={str(data_dir)!r}, cache_dir={str(cache_dir)!r}, download=False)\n"
        "print(time.perf_counter() - t)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def time_loads(name: str, data_dir: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="routing-rl-bench-") as tmp:
        cache_dir = Path(tmp)
        start = time.perf_counter()
        ds = load_dataset(name, data_dir=data_dir, cache_dir=cache_dir, download=False)
        cold = time.perf_counter() - start
        sizes = {"train": len(ds.train), "test": len(ds.test)}
        del ds
        start = time.perf_counter()
        ds = load_dataset(name, data_dir=data_dir, cache_dir=cache_dir, download=False)
        cached = time.perf_counter() - start
        del ds
        start = time.perf_counter()
        ds = load_dataset(name, data_dir=data_dir, cache_dir=cache_dir, download=False)
        float(ds.train.images.sum() + ds.test.images.sum())
        first_pass = time.perf_counter() - start
        del ds
        fresh = _fresh_process_load(name, data_dir, cache_dir)
    return {
        "sizes": sizes, "cold_s": round(cold, 3), "cached_s": round(cached, 4),
        "cached_fresh_process_s": round(fresh, 4), "cached_first_pass_s": round(first_pass, 3),
    }


def run(device: torch.device = torch.device("cpu"), data_dir: str | Path | None = None, datasets=PAPER_DATASETS) -> dict:
    data_dir = Path(data_dir) if data_dir else default_data_dir()
    result = {"device": str(device), "data_dir": str(data_dir)}
    if data_dir is not None:
        result["load"] = {name: time_loads(name, data_dir) for name in datasets}
    augment_ms = time_augment(device)
    step_ms = time_train_step(device)
    result["augment_ms_per_batch_128"] = round(augment_ms, 3)
    result["static8_train_step_ms_batch_128"] = round(step_ms, 2)
    result["augment_over_train_step"] = round(augment_ms / step_ms, 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", help="default: $ROUTING_RL_DATA_DIR, else ../shared/datasets")
    parser.add_argument("--datasets", nargs="*", default=list(PAPER_DATASETS), choices=DATASETS)
    args = parser.parse_args()
    print(json.dumps(run(torch.device("cpu"), args.data_dir, args.datasets), indent=2))


if __name__ == "__main__":
    main()
