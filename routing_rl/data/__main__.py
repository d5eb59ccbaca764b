"""``python -m routing_rl.data DATASET [--data-dir DIR] [--cache-dir DIR] [--no-download] [--json]``

Builds (or loads from the cache) a dataset and reports where it came from, per-split sizes,
per-class counts, image shape, value range and load time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from routing_rl.data import DATASETS, DataNotFoundError, load_dataset


def summary(name: str, data_dir=None, cache_dir=None, download: bool = True) -> dict:
    start = time.perf_counter()
    dataset = load_dataset(name, data_dir=data_dir, cache_dir=cache_dir, download=download)
    seconds = time.perf_counter() - start
    d = dataset.description
    splits = {}
    for split_name, split in (("train", dataset.train), ("test", dataset.test)):
        splits[split_name] = {
            "size": len(split),
            "class_counts": dict(zip(dataset.classes, d["class_counts"][split_name])),
            "source_counts": d["source_counts"][split_name],
            "image_shape": list(split.images.shape[1:]),
            "dtype": str(split.images.dtype).removeprefix("torch."),
            "value_range": [float(split.images.min()), float(split.images.max())],
        }
    return {
        "dataset": name,
        "classes": list(dataset.classes),
        "sources": d["sources"],
        "rule": d["rule"],
        "preprocessing": d["preprocessing"],
        "seeds": d["seeds"],
        "splits": splits,
        "load_seconds": round(seconds, 3),
    }


def _print_text(s: dict) -> None:
    print(f"dataset {s['dataset']}: {len(s['classes'])} classes, loaded in {s['load_seconds']:.2f} s")
    for kind, info in s["sources"].items():
        print(f"  {kind} from {info['found_in']}: {info['layout']} at {info['path']}")
        print(f"    split: {info['split']}")
    for line in s["preprocessing"]:
        print(f"  {line}")
    for key, value in s["rule"].items():
        print(f"  {key}: {value}")
    for split, info in s["splits"].items():
        lo, hi = info["value_range"]
        print(f"  {split}: {info['size']} images {info['image_shape']} {info['dtype']} "
              f"in [{lo:.4f}, {hi:.4f}]; by source {info['source_counts']}")
        print("    " + ", ".join(f"{c}: {n}" for c, n in info["class_counts"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m routing_rl.data", description=__doc__.split("\n\n")[1])
    parser.add_argument("dataset", choices=DATASETS)
    parser.add_argument("--data-dir", help="folder with your copies of MNIST / CIFAR-10 "
                        "(default: $ROUTING_RL_DATA_DIR)")
    parser.add_argument("--cache-dir", help="cache and download folder "
                        "(default: $ROUTING_RL_CACHE, else ~/.cache/routing-rl)")
    parser.add_argument("--no-download", action="store_true", help="never try torchvision's downloaders")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--verbose", action="store_true", help="when no data is found, also list every place looked "
                        "at and the accepted layouts")
    args = parser.parse_args(argv)
    try:
        s = summary(args.dataset, args.data_dir, args.cache_dir, download=not args.no_download)
    except (DataNotFoundError, ValueError) as e:  # not found, or an incomplete copy
        print(f"error: {e}", file=sys.stderr)
        if args.verbose and getattr(e, "details", ""):
            print(e.details, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        _print_text(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
