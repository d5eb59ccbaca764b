"""How far MACs are from time on this device: the latency cost model at several batch sizes.

The chain is profiled with :func:`routing_rl.core.latency.profile_latency` (every column,
router and head timed as routed execution runs it, one intra-op thread on the CPU) at each
batch size, and turned into the cost model that ``--cost latency`` charges
(:func:`~routing_rl.core.latency.latency_cost`, MAC-equivalents: the whole net costs its MACs,
shared out by measured time). Per batch size the result holds:

* ``b{B}_us_per_example`` — the whole chain's profiled time per example, in µs;
* ``b{B}_col{k}_time_over_macs`` — column k's cost in MAC-equivalents (with its router and
  head) over its MACs: above 1, the column is slower than its MACs say, so MAC-cost routing
  under-prices it; this is what latency-cost routing corrects;
* ``b{B}_exit1_time_share`` / ``b{B}_exit1_mac_share`` — the share of the full net's time and
  of its MACs spent on the path to the first exit.

    python benchmarks/bench_latency.py          # prints the JSON result, on the CPU
"""

from __future__ import annotations

import argparse
import json

import torch

from routing_rl.core.latency import latency_cost, profile_latency
from routing_rl.nets.multiscale import chain

BATCH_SIZES = (1, 64, 256)


def run(device: torch.device, batch_sizes=BATCH_SIZES, repeats: int = 15, warmup: int = 3) -> dict:
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        net = chain().to(device).eval()
        result = {"device": str(device), "threads": torch.get_num_threads(), "batch_sizes": list(batch_sizes)}
        for batch in batch_sizes:
            profile = profile_latency(net, batch, warmup=warmup, repeats=repeats)
            cost = latency_cost(net, profile)
            result[f"b{batch}_us_per_example"] = 1e6 * profile["full_seconds"]
            for k, column in enumerate((n for n in net.order if n.startswith("col")), start=1):
                head = f"exit{k}"
                macs = net.macs[column] + net.router_macs[column] + net.macs[head]
                result[f"b{batch}_col{k}_time_over_macs"] = (cost.node[column] + cost.node[head]) / macs
            result[f"b{batch}_exit1_time_share"] = float(cost.leaf[net.leaf_index["exit1"]]) / net.full_macs
            result[f"b{batch}_exit1_mac_share"] = net.leaf_path_macs[net.leaf_index["exit1"]] / net.full_macs
            result[f"b{batch}_profile"] = profile
    finally:
        torch.set_num_threads(threads)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(run(torch.device(args.device), repeats=args.repeats), indent=2))


if __name__ == "__main__":
    main()
