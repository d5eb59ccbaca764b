"""Dynamic execution against full evaluation and against perfect skipping, per batch size.

The chain's routers are set so that, of a pool of examples, half exit after column 1, a
quarter after column 3 and the rest run to the end. For each batch size the same examples
run, in batches of that size, three ways:

* full — every column, head and router of the chain (``full``);
* dynamic — argmax routing, computing only each example's path (``dynamic``);
* perfect skipping — as if every exit were known in advance: each batch's exit groups run on
  their own, each through the package's plain ``static(1)``, ``static(3)`` or ``static(8)``
  net holding the chain's weights (no routers, no gathers, no bookkeeping).

At batch sizes below ``min_examples`` a round runs that many examples, batch after batch.
The three run in interleaved rounds (see ``timing.interleaved_seconds``); per batch size
the result holds ``mac_ratio`` (full MACs / mean dynamic MACs), ``full_to_dynamic`` and
``full_to_perfect`` (speedups over full evaluation) and ``dynamic_over_perfect`` (perfect
skipping's time / dynamic execution's; target >= 0.9), each the median of per-round
ratios, with the lowest and highest round in ``*_range``. ``cpu_time`` holds the same ratios
from the CPU time of this process, which on a crowded machine leaves out the waits for a
core that make the wall-clock ratios noisy (``b{N}_dynamic_over_perfect_cpu_time``).

``single_example`` is the online case, one example per call: the plain ``static(8)`` net,
``dynamic`` on that static net (routing bookkeeping alone) and ``dynamic`` on the chain for
an example that runs to the end (bookkeeping plus seven routers), in ms per call.

CPU runs use one intra-op thread (as ``bench_learners``) and the allocator setting of
:func:`routing_rl.core.memory.retain_freed_memory`, as the command-line tools do;
``allocator_default`` repeats batch 1024 in a fresh process that sets nothing itself — what a
library user's own script gets, since the first routed execution on the CPU applies the
setting. (``ROUTING_RL_RETAIN_FREED_MEMORY=0 python benchmarks/bench_execution.py
--allocator-default`` keeps glibc's default thresholds, to show what the setting buys.)

    python benchmarks/bench_execution.py            # prints the JSON result, on the CPU
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import torch
from timing import interleaved_seconds, median_ratio, ratio_range

from routing_rl.core.execution import dynamic, full
from routing_rl.core.memory import retain_freed_memory
from routing_rl.nets.multiscale import chain, static

EXIT_FRACTIONS = {"col1": 0.5, "col3": 0.5}
"""Junction -> fraction of the examples reaching it that exit there; other junctions continue."""
BATCH_SIZES = (1, 8, 64, 256, 1024)
SINGLE_EXAMPLE_CALLS = 20
"""Calls per timed round in ``single_example``: one call is too short to time alone."""


@torch.no_grad()
def set_exit_fractions(net, x: torch.Tensor, fractions: dict[str, float], seed: int = 0) -> None:
    """Point each 2-way router at a data-dependent split: for the examples that reach junction
    j, a random projection of the router's hidden features decides, exiting for the top
    ``fractions[j]`` of them; junctions not named always continue (sink 1)."""
    generator = torch.Generator().manual_seed(seed)
    for name in net.junctions:
        last = net.nodes[name].router.layers[-1]
        last.weight.zero_()
        last.bias.copy_(torch.tensor([0.0, 1.0]))
        if name in fractions:
            last.weight[0] = torch.randn(last.in_features, generator=generator).to(last.weight)
    for name in fractions:
        reached = dynamic(net, x).visits[name]
        exit_score = full(net, x[reached]).scores[name][:, 0]
        net.nodes[name].router.layers[-1].bias[0] = 1.0 - torch.quantile(exit_score.cpu(), 1.0 - fractions[name])


def perfect_skipping_nets(net) -> dict[int, torch.nn.Module]:
    """Leaf index in the chain -> ``static(k)`` holding the chain's columns 1..k and head k."""
    weights = net.state_dict()
    nets = {}
    for index, leaf in enumerate(net.leaves):
        columns = int(leaf.removeprefix("exit"))
        plain = static(columns, classes=net.classes)
        plain.load_state_dict({key: weights[key] for key in plain.state_dict()})
        nets[index] = plain.to(net.leaf_macs.device).eval()
    return nets


def _exit_groups(net, batch: torch.Tensor, plain_nets) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    leaf = dynamic(net, batch).leaf
    return [(plain_nets[i], batch[leaf == i].contiguous()) for i in torch.unique(leaf).tolist()]


def batch_row(net, plain_nets, x: torch.Tensor, batch_size: int, repeats: int, min_examples: int) -> dict:
    """Full, dynamic and perfect skipping on ``max(batch_size, min_examples)`` examples."""
    device = x.device
    examples = max(batch_size, min_examples)
    batches = [x[start : start + batch_size] for start in range(0, examples, batch_size)]
    plan = [_exit_groups(net, batch, plain_nets) for batch in batches]
    dynamic_macs = torch.cat([dynamic(net, batch).macs for batch in batches]).double().mean().item()

    def full_pass():
        for batch in batches:
            full(net, batch)

    def dynamic_pass():
        for batch in batches:
            dynamic(net, batch)

    def perfect_pass():
        for groups in plan:
            for plain, group in groups:
                plain(group)

    with torch.inference_mode():
        times, cpu = interleaved_seconds({"full": full_pass, "dynamic": dynamic_pass, "perfect": perfect_pass}, device, repeats)
    return {
        "examples": examples,
        "mac_ratio": net.full_macs / dynamic_macs,
        "full_seconds": statistics.median(times["full"]),
        "dynamic_seconds": statistics.median(times["dynamic"]),
        "perfect_seconds": statistics.median(times["perfect"]),
        "full_to_dynamic": median_ratio(times["full"], times["dynamic"]),
        "full_to_perfect": median_ratio(times["full"], times["perfect"]),
        "dynamic_over_perfect": median_ratio(times["perfect"], times["dynamic"]),
        "dynamic_over_perfect_range": ratio_range(times["perfect"], times["dynamic"]),
        "cpu_time": {
            "full_to_dynamic": median_ratio(cpu["full"], cpu["dynamic"]),
            "full_to_perfect": median_ratio(cpu["full"], cpu["perfect"]),
            "dynamic_over_perfect": median_ratio(cpu["perfect"], cpu["dynamic"]),
            "dynamic_over_perfect_range": ratio_range(cpu["perfect"], cpu["dynamic"]),
        },
    }


def single_example(net, plain_nets, x: torch.Tensor, repeats: int) -> dict:
    """ms per call at batch 1, for an example the chain routes to its last exit."""
    last = len(net.leaves) - 1
    through = (dynamic(net, x).leaf == last).nonzero()[:1, 0]
    example = x[through].contiguous()
    plain = plain_nets[last]

    def calls(fn):
        def repeated():
            for _ in range(SINGLE_EXAMPLE_CALLS):
                fn()
        return repeated

    with torch.inference_mode():
        times, cpu = interleaved_seconds({
            "static": calls(lambda: plain(example)),
            "dynamic_static": calls(lambda: dynamic(plain, example)),
            "dynamic_chain": calls(lambda: dynamic(net, example)),
        }, x.device, repeats)
    ms = {name: 1e3 * statistics.median(t) / SINGLE_EXAMPLE_CALLS for name, t in times.items()}
    return {
        "static8_ms": ms["static"],
        "dynamic_on_static8_ms": ms["dynamic_static"],
        "dynamic_chain_to_exit8_ms": ms["dynamic_chain"],
        "routing_overhead_ms": ms["dynamic_chain"] - ms["static"],
        "dynamic_chain_over_static8": median_ratio(times["dynamic_chain"], times["static"]),
        "dynamic_chain_over_static8_range": ratio_range(times["dynamic_chain"], times["static"]),
        "dynamic_on_static8_over_static8": median_ratio(times["dynamic_static"], times["static"]),
        "cpu_time": {name: 1e3 * statistics.median(t) / SINGLE_EXAMPLE_CALLS for name, t in cpu.items()}
        | {"dynamic_chain_over_static8": median_ratio(cpu["dynamic_chain"], cpu["static"])},
    }


def setup(device: torch.device, examples: int):
    torch.manual_seed(0)
    net = chain().to(device).eval()
    x = torch.rand(examples, 3, 32, 32, generator=torch.Generator().manual_seed(0)).to(device)
    set_exit_fractions(net, x, EXIT_FRACTIONS)
    return net, perfect_skipping_nets(net), x


def _pinned_threads(device: torch.device):
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    return threads


def _allocator_default(device: torch.device, repeats: int) -> dict:
    """Batch 1024 in a fresh process that sets no allocator threshold itself (a library user's)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--allocator-default", "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(device: torch.device, batch_sizes=BATCH_SIZES, repeats: int = 7, min_examples: int = 64,
        examples: int = 1024, allocator_default: bool = True) -> dict:
    result = {"device": str(device), "exit_fractions": EXIT_FRACTIONS}
    if device.type == "cpu" and allocator_default:
        result["allocator_default"] = _allocator_default(device, repeats)
    result["retain_freed_memory"] = retain_freed_memory() if device.type == "cpu" else None
    threads = _pinned_threads(device)
    try:
        result["threads"] = torch.get_num_threads()
        net, plain_nets, x = setup(device, max(examples, *batch_sizes))
        leaf = dynamic(net, x).leaf
        exits = torch.bincount(leaf, minlength=len(net.leaves)).tolist()
        result["exit_fraction_by_leaf"] = {name: count / len(x) for name, count in zip(net.leaves, exits)}
        result["by_batch_size"] = {b: batch_row(net, plain_nets, x, b, repeats, min_examples) for b in batch_sizes}
        result["single_example"] = single_example(net, plain_nets, x, repeats)
    finally:
        torch.set_num_threads(threads)
    rows = result["by_batch_size"]
    result["worst_dynamic_over_perfect"] = min(row["dynamic_over_perfect"] for row in rows.values())
    for b, row in rows.items():  # flat keys, so that run.py prints them side by side
        for key in ("mac_ratio", "full_to_dynamic", "full_to_perfect", "dynamic_over_perfect"):
            result[f"b{b}_{key}"] = row[key]
        result[f"b{b}_dynamic_over_perfect_cpu_time"] = row["cpu_time"]["dynamic_over_perfect"]
    for key in ("static8_ms", "dynamic_chain_to_exit8_ms", "dynamic_chain_over_static8"):
        result[f"batch1_{key}"] = result["single_example"][key]
    result["batch1_dynamic_chain_over_static8_cpu_time"] = result["single_example"]["cpu_time"]["dynamic_chain_over_static8"]
    if "allocator_default" in result:
        result["b1024_default_allocator_dynamic_over_perfect"] = result["allocator_default"]["dynamic_over_perfect"]
        result["b1024_default_allocator_full_to_dynamic"] = result["allocator_default"]["full_to_dynamic"]
    result["target"] = "dynamic_over_perfect >= 0.9 at every batch size"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--allocator-default", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.allocator_default:
        _pinned_threads(device)
        net, plain_nets, x = setup(device, 1024)
        result = batch_row(net, plain_nets, x, 1024, args.repeats, 1024)
        print(json.dumps(result))
        return
    print(json.dumps(run(device, repeats=args.repeats), indent=1))


if __name__ == "__main__":
    main()
