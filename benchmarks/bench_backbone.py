"""A routed ResNet backbone on the clock: dynamic execution against the full network and the ideal skip.

The ``resnet20-exits`` chain's routers are set (as ``bench_execution`` sets the multiscale
chain's) so that half of the examples exit after the first stage, a quarter after the second
and the rest run to the end. For each batch size (1, 64, 256) the same examples run three ways,
in interleaved rounds (``timing.interleaved_seconds``):

* full — the whole network, every head and router (``full``);
* dynamic — argmax routing, computing only each example's path (``dynamic``);
* ideal — every exit known in advance: each batch's exit groups run on their own through the
  static path to their exit (``path_net``, the same modules), no routers, no gathers.

Per batch size: ``*_us_per_image`` (median wall time per example), ``mac_ratio`` (full MACs /
mean dynamic MACs), ``dynamic_over_ideal`` (the ideal's time / dynamic's; target >= 0.9 at 64
and 256) and ``saving_on_clock`` — the fraction of the MAC saving that shows on the clock,
``(1 - t_dynamic / t_full) / (1 - MACs_dynamic / MACs_full)`` (1: every MAC skipped is time
saved). ``--arch`` and ``--width`` pick another ResNet of :mod:`routing_rl.nets.resnet`.

    python benchmarks/bench_backbone.py                     # ResNet-20, the JSON result, on the CPU
    python benchmarks/bench_backbone.py --arch resnet56-exits --examples 1024
"""

from __future__ import annotations

import argparse
import json

import torch
from bench_execution import _pinned_threads, batch_row, set_exit_fractions

from routing_rl.core.execution import dynamic
from routing_rl.core.graph import path_net
from routing_rl.core.memory import retain_freed_memory
from routing_rl.nets import resnet

EXIT_FRACTIONS = {"seg1": 0.5, "seg2": 0.5}
"""Junction -> fraction of the examples reaching it that exit there."""
BATCH_SIZES = (1, 64, 256)


def setup(device: torch.device, examples: int, arch: str = "resnet20-exits", width: int = 1):
    """The routed backbone with its routers set, the ideal's static path per leaf, and the examples."""
    torch.manual_seed(0)
    net = resnet.build(arch, width).to(device).eval()
    x = torch.rand(examples, 3, 32, 32, generator=torch.Generator().manual_seed(0)).to(device)
    set_exit_fractions(net, x, EXIT_FRACTIONS)
    ideal = {index: path_net(net, leaf).eval() for index, leaf in enumerate(net.leaves)}
    return net, ideal, x


def saving_on_clock(full_to_dynamic: float, mac_ratio: float) -> float:
    """The share of the MAC saving that the wall clock shows (both as speedups over full)."""
    return (1 - 1 / full_to_dynamic) / (1 - 1 / mac_ratio)


def run(device: torch.device, batch_sizes=BATCH_SIZES, repeats: int = 5, min_examples: int = 64, examples: int = 256,
        arch: str = "resnet20-exits", width: int = 1) -> dict:
    result = {"device": str(device), "arch": arch, "width": width, "exit_fractions": EXIT_FRACTIONS}
    result["retain_freed_memory"] = retain_freed_memory() if device.type == "cpu" else None
    threads = _pinned_threads(device)
    try:
        result["threads"] = torch.get_num_threads()
        net, ideal, x = setup(device, max(examples, *batch_sizes), arch, width)
        exits = torch.bincount(dynamic(net, x).leaf, minlength=len(net.leaves)).tolist()
        result["exit_fraction_by_leaf"] = {name: count / len(x) for name, count in zip(net.leaves, exits)}
        rows = {b: batch_row(net, ideal, x, b, repeats, min_examples) for b in batch_sizes}
    finally:
        torch.set_num_threads(threads)
    result["by_batch_size"] = {}
    for b, row in rows.items():
        per_image = {f"{kind}_us_per_image": 1e6 * row[f"{name}_seconds"] / row["examples"]
                     for kind, name in (("full", "full"), ("dynamic", "dynamic"), ("ideal", "perfect"))}
        summary = {**per_image, "mac_ratio": row["mac_ratio"], "full_to_dynamic": row["full_to_dynamic"],
                   "full_to_ideal": row["full_to_perfect"], "dynamic_over_ideal": row["dynamic_over_perfect"],
                   "dynamic_over_ideal_range": row["dynamic_over_perfect_range"],
                   "saving_on_clock": saving_on_clock(row["full_to_dynamic"], row["mac_ratio"]),
                   "ideal_saving_on_clock": saving_on_clock(row["full_to_perfect"], row["mac_ratio"]),
                   "dynamic_over_ideal_cpu_time": row["cpu_time"]["dynamic_over_perfect"]}
        result["by_batch_size"][b] = summary
        for key in ("full_us_per_image", "dynamic_us_per_image", "ideal_us_per_image", "dynamic_over_ideal",
                    "saving_on_clock"):  # flat keys, so that run.py prints them side by side
            result[f"b{b}_{key}"] = summary[key]
    result["target"] = "dynamic_over_ideal >= 0.9 at batch 64 and 256"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--examples", type=int, default=256, help="examples per round at batch 64 and 256 (default 256)")
    parser.add_argument("--arch", default="resnet20-exits", choices=[a for a in resnet.arch_names() if a.endswith("-exits")])
    parser.add_argument("--width", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(run(torch.device(args.device), repeats=args.repeats, examples=args.examples, arch=args.arch,
                         width=args.width), indent=1))


if __name__ == "__main__":
    main()
