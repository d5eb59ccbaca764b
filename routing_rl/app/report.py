"""The reproduction report: every run's test points measured against the static nets.

A routed net is judged against the static frontier (:mod:`routing_rl.app.frontier`): the
upper-left hull of the static nets' accuracy/MAC points, linear between its points, dominated
static nets (a deeper net worse than a shallower one) left out. ``margin`` is a point's
accuracy minus the frontier's accuracy at the same mean MACs (in accuracy points, ×100); it
is ``None`` left of the cheapest static net, where the frontier says nothing. Right of the
most accurate static net the frontier is flat at that net's accuracy.

``markdown_report(runs, points)`` writes the table of the closing notes: accuracy, MACs and margin
of every point, the two targets of the reproduction, and for every routed net how many
test images of each source (MNIST/CIFAR) leave at each exit.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from routing_rl.app.frontier import frontier_margin, static_frontier
from routing_rl.data import SOURCES

STATIC_SERIES = "static nets"
"""The series name of the static nets' points, the curve every other point is judged against."""


def static_curve(points: Sequence[dict]) -> list[tuple[float, float]]:
    """The static frontier of the static nets' points: (mean MACs, accuracy), in order of MACs."""
    return static_frontier((p["mean_macs"], p["accuracy"]) for p in points if p["series"] == STATIC_SERIES)


def margin(curve: Sequence[tuple[float, float]], point: dict) -> float | None:
    """Accuracy points (×100) above the static frontier at the point's MACs."""
    return frontier_margin(curve, point["accuracy"], point["mean_macs"])


def targets(points: Sequence[dict], series: str = "actor") -> dict:
    """The reproduction's two targets for the points of every series named ``series...``
    (fixed and dynamic-k_cpt nets alike).

    ``all_above``: every point lies above the static frontier. ``cheap_match``: the points
    (``run`` or ``run@k_cpt`` for dynamic nets) within 0.5 accuracy point of the best static
    net at no more than half its MACs.
    """
    curve = static_curve(points)
    if not curve:
        raise ValueError("no static nets among the runs: train static-N nets to compare against (--agent static)")
    best_macs, best_acc = max(curve, key=lambda c: (c[1], -c[0]))
    mine = [p for p in points if p["series"].startswith(series)]
    margins = [margin(curve, p) for p in mine]
    return {
        "best_static": {"accuracy": best_acc, "mean_macs": best_macs},
        "all_above": bool(mine) and all(m is not None and m > 0 for m in margins),
        "cheap_match": [_point_name(p) for p in mine if p["accuracy"] >= best_acc - 0.005 and p["mean_macs"] <= best_macs / 2],
    }


def _point_name(point: dict) -> str:
    name = Path(point["run"]).name
    return f"{name}@k_cpt={point['k_cpt']:g}" if "dynamic" in point["series"] else name


def exits_by_source(run: dict) -> list[tuple[str, list[tuple[str, dict]]]]:
    """Per test evaluation of a routed run: (label, [(leaf, {source: count})]), leaves in
    the order of the net, leaves that no example reached left out."""
    rows = []
    for evaluation in run["test"]:
        k_cpt = evaluation.get("k_cpt")
        label = evaluation.get("label") or (f"k_cpt={k_cpt:g}" if k_cpt is not None else "")
        leaves = [(leaf, v["by_source"]) for leaf, v in evaluation["leaves"].items() if v["count"]]
        rows.append((label, leaves))
    return rows


def _macs(value: float) -> str:
    return f"{value / 1e6:.2f}M"


def markdown_report(runs: Sequence[dict], points: Sequence[dict], task: str = "") -> str:
    """The table of test points, the targets and the exits by source, as Markdown.

    runs: ``metrics.json`` contents of runs of one task; points: their test points
    (:func:`routing_rl.app.figures.test_points`); task: its name, written above the table.
    """
    curve = static_curve(points)
    lines = [f"Task: {task}.", ""] if task else []
    lines += ["| series | run | point | test accuracy | mean MACs | vs static frontier (pts) |", "|---|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (p["series"], p["mean_macs"])):
        m = margin(curve, p)
        static = p["series"] == STATIC_SERIES
        point = p["label"] or (f"k_cpt={p['k_cpt']:g}" if p["k_cpt"] is not None and not static else "")
        shown = "—" if m is None or static else f"{m:+.2f}"
        lines.append(f"| {p['series']} | {Path(p['run']).name} | {point} | {100 * p['accuracy']:.2f}% | {_macs(p['mean_macs'])} | {shown} |")
    if curve:
        goal = targets(points)
        best = goal["best_static"]
        lines += [
            "",
            f"Best static net: {100 * best['accuracy']:.2f}% at {_macs(best['mean_macs'])} MACs.",
            f"Every actor point (fixed and dynamic k_cpt) above the static frontier: {'yes' if goal['all_above'] else 'no'}.",
            "Actor points within 0.5 pt of it at <= half its MACs: " + (", ".join(goal["cheap_match"]) or "none") + ".",
        ]
    routed = [run for run in runs if run["structure"]["junctions"]]
    for run in routed:
        sources = run.get("sources", SOURCES)  # the task's names; runs made before tasks: the paper's
        lines += ["", f"Test examples leaving at each exit, {Path(run['run']).name} ({' / '.join(sources)}):", ""]
        for label, leaves in exits_by_source(run):
            cells = ", ".join(f"{leaf} {' / '.join(str(counts.get(s, 0)) for s in sources)}" for leaf, counts in leaves)
            lines.append(f"- {label}: {cells}")
    return "\n".join(lines) + "\n"
