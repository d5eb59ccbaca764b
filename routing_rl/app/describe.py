"""Print a routed net's tree with each node's and router's MACs per example.

    python -m routing_rl.app.describe --arch chain
    python -m routing_rl.app.describe --arch static-8 --width 2 --classes 2 --json
"""

from __future__ import annotations

import argparse
import json
import sys

from routing_rl.core.graph import RoutedNet
from routing_rl.nets.multiscale import arch_names, build


def summary(net: RoutedNet) -> dict:
    """A JSON-ready description: nodes in pre-order with MACs, and the MAC totals."""
    nodes = []
    for name in net.order:
        node = net.nodes[name]
        nodes.append(
            {
                "name": name,
                "kind": "leaf" if node.is_leaf else ("junction" if node.is_junction else "node"),
                "parent": net.parent[name],
                "depth": len(net.nodes_to(name)) - 1,
                "sinks": node.sinks,
                "macs": net.macs[name],
                "router_macs": net.router_macs[name],
                "params": sum(p.numel() for p in node.parameters()),
            }
        )
    path_macs = {leaf: int(m) for leaf, m in zip(net.leaves, net.leaf_macs.tolist())}
    return {
        "nodes": nodes,
        "leaves": len(net.leaves),
        "junctions": len(net.junctions),
        "leaf_path_macs": path_macs,
        "total_macs": {
            "full_evaluation": net.full_macs,
            "transforms": sum(net.macs[n] for n in net.order if not net.nodes[n].is_leaf),
            "heads": sum(net.macs[n] for n in net.leaves),
            "routers": sum(net.router_macs.values()),
            "cheapest_path": min(path_macs.values()),
            "costliest_path": max(path_macs.values()),
        },
        "params": sum(p.numel() for p in net.parameters()),
        "k_cpt_input": net.k_cpt_input,
    }


def table(description: dict) -> str:
    labels = ["  " * node["depth"] + node["name"] for node in description["nodes"]]
    width = max(map(len, labels)) + 2
    lines = [f"{'node':<{width}}{'kind':<10}{'sinks':<28}{'MACs':>14}{'router MACs':>14}"]
    for label, node in zip(labels, description["nodes"]):
        sinks = ",".join(node["sinks"])
        lines.append(f"{label:<{width}}{node['kind']:<10}{sinks[:27]:<28}{node['macs']:>14,}{node['router_macs']:>14,}")
    lines.append("")
    for key, value in description["total_macs"].items():
        lines.append(f"{key.replace('_', ' ') + ' MACs':<30}{value:>16,}")
    lines.append(f"{'parameters':<30}{description['params']:>16,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m routing_rl.app.describe", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="chain", help=f"one of {', '.join(arch_names())} (default: chain)")
    parser.add_argument("--width", type=int, default=1, help="channel multiplier (default: 1)")
    parser.add_argument("--classes", type=int, default=10, help="number of classes (default: 10)")
    parser.add_argument("--k-cpt-input", action="store_true", help="routers also read k_cpt (dynamic k_cpt)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        net = build(args.arch, width=args.width, classes=args.classes, k_cpt_input=args.k_cpt_input)
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    description = {"arch": args.arch, "width": args.width, "classes": args.classes, **summary(net)}
    print(json.dumps(description, indent=2) if args.json else table(description))
    return 0


if __name__ == "__main__":
    sys.exit(main())
