"""The paper's figures, drawn from evaluations and run directories.

* :func:`accuracy_macs_figure` — test accuracy against mean MACs per example (Fig. 5).
* :func:`accuracy_time_figure` — the same beside accuracy against measured wall time per
  example (MAC-cost vs latency-cost routing, :mod:`routing_rl.app.latency`).
* :func:`node_link_figure` — one row per net: a circle at each node whose area is the
  fraction of examples classified there, coloured by accuracy (left) and by the mix of
  sources or classes classified there (right) (Figs. 6, 7).
* :func:`routing_heatmap_figure` — fraction of validation examples at each leaf over the
  course of training (Fig. 8).

Inputs are the JSON-ready dicts of :func:`routing_rl.training.evaluate.evaluate` and
:func:`routing_rl.app.describe.summary`, so figures can be redrawn from saved runs alone.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

CIRCLE_AREA = 900.0  # points² for a node that classifies every example


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def accuracy_macs_figure(points: Sequence[dict], title: str = "") -> Figure:
    """Accuracy (%) against mean MACs per example.

    points: dicts with ``series`` (the legend entry), ``accuracy`` (0..1) and ``mean_macs``;
    each series' frontier (its points that no other of its points beats) is joined by a line.
    """
    figure, ax = plt.subplots(figsize=(7, 4.5))
    _accuracy_panel(ax, points, "mean_macs", "mean MACs per example")
    if title:
        ax.set_title(title)
    figure.tight_layout()
    return figure


def accuracy_time_figure(points: Sequence[dict], title: str = "") -> Figure:
    """Accuracy (%) against mean MACs per example (left) and measured wall time per example
    (right, µs): ``points`` as :func:`accuracy_macs_figure`'s, with ``seconds_per_image``."""
    figure, (ax_macs, ax_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    _accuracy_panel(ax_macs, points, "mean_macs", "mean MACs per example")
    _accuracy_panel(ax_time, [{**p, "us": 1e6 * p["seconds_per_image"]} for p in points], "us",
                    "measured wall time per example (µs)")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def frontier(points: Sequence[dict], x: str) -> list[dict]:
    """The points no other point beats (as low an ``x`` and a higher accuracy, or a lower
    ``x`` and as high an accuracy), in order of ``x``."""
    best, kept = float("-inf"), []
    for point in sorted(points, key=lambda p: (p[x], -p["accuracy"])):
        if point["accuracy"] > best:
            best = point["accuracy"]
            kept.append(point)
    return kept


def _accuracy_panel(ax, points: Sequence[dict], x: str, xlabel: str) -> None:
    """Test accuracy (%) against ``point[x]``: every point of a ``series`` as a marker, its
    :func:`frontier` joined by a line (runs of several seeds would zigzag otherwise)."""
    series: dict[str, list[dict]] = {}
    for point in points:
        series.setdefault(point["series"], []).append(point)
    for name, members in series.items():
        line = frontier(members, x)
        drawn = ax.plot([p[x] for p in line], [100 * p["accuracy"] for p in line], "-" if len(line) > 1 else "",
                        label=name)[0]
        ax.plot([p[x] for p in members], [100 * p["accuracy"] for p in members], "o", color=drawn.get_color(),
                markersize=5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def layout(structure: dict) -> dict[str, tuple[float, float]]:
    """(x, y) of every node: x is the depth in non-leaf nodes, y spreads branches apart
    (each node centred over its children); a leaf sits on its parent's position."""
    nodes = {n["name"]: n for n in structure["nodes"]}
    root = next(n["name"] for n in structure["nodes"] if n["parent"] is None)
    positions: dict[str, tuple[float, float]] = {}
    next_row = [0.0]

    def place(name: str, depth: int) -> float:
        inner = [s for s in nodes[name]["sinks"] if nodes[s]["sinks"]]
        if inner:
            ys = [place(child, depth + 1) for child in inner]
            y = sum(ys) / len(ys)
        else:
            y = next_row[0]
            next_row[0] += 1.0
        positions[name] = (float(depth), y)
        for sink in nodes[name]["sinks"]:
            if not nodes[sink]["sinks"]:
                positions[sink] = (float(depth), y)
        return y

    if nodes[root]["sinks"]:
        place(root, 0)
    else:
        positions[root] = (0.0, 0.0)
    return positions


def _mix(leaf: dict, by_source: bool) -> float:
    """What a leaf classifies, as a number in [0, 1] for a colour map: the mean source index of
    its examples over the source count when the data mixes sources (the CIFAR share on the
    hybrid set), else their mean class index over the class count."""
    if not leaf["count"]:
        return 0.5
    if by_source:
        counts = list(leaf["by_source"].values())
        return sum(i * c for i, c in enumerate(counts)) / leaf["count"] / max(len(counts) - 1, 1)
    counts = list(leaf["by_class"].values())
    return sum(i * c for i, c in enumerate(counts)) / leaf["count"] / max(len(counts) - 1, 1)


def mixes_sources(evaluation: dict) -> bool:
    totals: dict[str, int] = {}
    for leaf in evaluation["leaves"].values():
        for source, count in leaf["by_source"].items():
            totals[source] = totals.get(source, 0) + count
    return sum(1 for count in totals.values() if count) > 1


def mix_legend(evaluation: dict) -> str:
    """What the right panel's colours mean, in the evaluation's own source or class names:
    ``blue: <first> / red: <last>``."""
    leaf = next(iter(evaluation["leaves"].values()))
    names = list(leaf["by_source"] if mixes_sources(evaluation) else leaf["by_class"])
    middle = "" if len(names) <= 2 else " (between: the mean index)"
    return f"blue: {names[0]} / red: {names[-1]}{middle}"


def node_link_figure(rows: Sequence[tuple[str, dict, dict]]) -> Figure:
    """One row per net: ``(label, structure, evaluation)``.

    Left panel: circle area = fraction of examples classified at that node, colour = its
    accuracy. Right panel: the same circles coloured by the mean source index of the examples
    there (the CIFAR share on hybrid data), or by their mean class index for one source; the
    legend names the evaluation's own sources or classes (:func:`mix_legend`). Leaves are labelled.
    """
    heights = []
    for _, structure, _ in rows:
        ys = [y for _, y in layout(structure).values()]
        heights.append(max(ys) - min(ys) + 1)
    figure, axes = plt.subplots(len(rows), 2, figsize=(11, 0.9 + sum(0.45 * h + 0.5 for h in heights)),
                                squeeze=False, gridspec_kw={"height_ratios": heights})
    scatters = [None, None]
    for (label, structure, evaluation), (ax_accuracy, ax_mix) in zip(rows, axes):
        positions = layout(structure)
        by_source = mixes_sources(evaluation)
        for ax, colour_of, cmap in (
            (ax_accuracy, lambda leaf: leaf["accuracy"] if leaf["accuracy"] is not None else 0.0, "viridis"),
            (ax_mix, lambda leaf: _mix(leaf, by_source), "coolwarm"),
        ):
            for node in structure["nodes"]:
                if node["parent"] is not None and node["sinks"]:
                    (x0, y0), (x1, y1) = positions[node["parent"]], positions[node["name"]]
                    ax.plot([x0, x1], [y0, y1], color="0.75", lw=1, zorder=1)
            inner = [n["name"] for n in structure["nodes"] if n["sinks"]]
            ax.scatter([positions[n][0] for n in inner], [positions[n][1] for n in inner], s=8, color="0.5", zorder=2)
            for name in evaluation["leaves"]:  # leaves named: a task's own nets are not columns of the paper's
                ax.annotate(name, positions[name], xytext=(0, -9), textcoords="offset points", ha="center",
                            va="top", fontsize=6, color="0.3", zorder=4)
            leaves = [(name, leaf) for name, leaf in evaluation["leaves"].items() if leaf["count"]]
            scatters[ax is ax_mix] = ax.scatter(
                [positions[name][0] for name, _ in leaves],
                [positions[name][1] for name, _ in leaves],
                s=[CIRCLE_AREA * leaf["fraction"] for _, leaf in leaves],
                c=[colour_of(leaf) for _, leaf in leaves],
                cmap=cmap, vmin=0.0, vmax=1.0, edgecolors="k", linewidths=0.5, zorder=3,
            )
            ax.set_yticks([])
            depth = int(max(x for x, _ in positions.values())) + 1
            ax.set_xticks(range(depth), [str(column + 1) for column in range(depth)])
            ax.margins(0.08, 0.3)
            ax.invert_yaxis()
            for side in ("top", "right", "left"):
                ax.spines[side].set_visible(False)
        ax_accuracy.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    axes[0, 0].set_title("accuracy at each exit (area: share of examples)", fontsize=9)
    axes[0, 1].set_title(f"what exits there ({mix_legend(rows[0][2])})", fontsize=9)
    for ax in axes[:-1].flat:
        ax.tick_params(labelbottom=False)
    axes[-1, 0].set_xlabel("column")
    axes[-1, 1].set_xlabel("column")
    for column, scatter in enumerate(scatters):
        figure.colorbar(scatter, ax=axes[:, column].tolist(), fraction=0.02, pad=0.01)
    return figure


def routing_heatmap_figure(rows: Sequence[tuple[str, list[str], list[int], list[list[float]]]]) -> Figure:
    """One panel per net: ``(label, leaf names, iterations, fractions[eval][leaf])``, the
    fraction of validation examples classified at each leaf (rows) over training (columns)."""
    figure, axes = plt.subplots(len(rows), 1, figsize=(9, 0.8 + sum(0.25 * len(r[1]) + 0.6 for r in rows)), squeeze=False)
    for (label, leaves, iterations, fractions), ax in zip(rows, axes[:, 0]):
        matrix = [[step[i] for step in fractions] for i in range(len(leaves))]
        image = ax.imshow(matrix, aspect="auto", cmap="magma", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_yticks(range(len(leaves)), leaves, fontsize=7)
        ticks = list(range(0, len(iterations), max(1, len(iterations) // 8)))
        ax.set_xticks(ticks, [str(iterations[t]) for t in ticks], fontsize=7)
        ax.set_title(label, fontsize=9)
        figure.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    axes[-1, 0].set_xlabel("training iteration")
    figure.tight_layout()
    return figure


LEAF_COLOURS = ("0.8", "tab:orange", "tab:blue", "tab:green", "tab:purple", "tab:red")
"""Colours of a video net's leaves in :func:`video_figure`, in ``net.leaves`` order."""


def video_figure(frames, events: Sequence[str], leaves: Sequence[str], runs: Sequence[dict]) -> Figure:
    """One clip routed by every policy, and every policy's accuracy and MACs per frame.

    frames: ``(T, 3, H, W)`` the clip's frames in [0, 1]; events: ``T`` labels drawn over
    them ("cut", "change" or ""). leaves: the net's leaf names. runs: one dict per policy with
    ``name``, ``leaf`` (``T`` leaf indices on the clip), ``correct`` (``T`` bools on the clip),
    ``accuracy_by_frame`` and ``macs_by_frame`` (means over the test clips per frame position).
    """
    length = len(frames)
    figure = plt.figure(figsize=(max(10, 0.62 * length), 3.2 + 0.32 * len(runs)))
    grid = figure.add_gridspec(3, length, height_ratios=[1.0, 0.3 * len(runs), 2.2], hspace=0.35)
    for t in range(length):
        ax = figure.add_subplot(grid[0, t])
        ax.imshow(frames[t].permute(1, 2, 0).clamp(0, 1).cpu().numpy())
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_title(events[t] or str(t), fontsize=7, color="tab:red" if events[t] else "k")
    routes = figure.add_subplot(grid[1, :])
    for row, run in enumerate(runs):
        colours = [LEAF_COLOURS[leaf % len(LEAF_COLOURS)] for leaf in run["leaf"]]
        routes.scatter(range(length), [row] * length, c=colours, marker="s", s=90, edgecolors="k", linewidths=0.3)
        wrong = [t for t in range(length) if not run["correct"][t]]
        routes.scatter(wrong, [row] * len(wrong), marker="x", color="k", s=25)
    routes.set_yticks(range(len(runs)), [run["name"] for run in runs], fontsize=7)
    routes.set_xticks(range(length), [str(t) for t in range(length)], fontsize=6)
    routes.set_xlim(-0.5, length - 0.5)
    routes.invert_yaxis()
    handles = [plt.Line2D([], [], marker="s", ls="", color=LEAF_COLOURS[i % len(LEAF_COLOURS)], label=name)
               for i, name in enumerate(leaves)]
    handles.append(plt.Line2D([], [], marker="x", ls="", color="k", label="wrong"))
    routes.legend(handles=handles, fontsize=7, ncol=len(handles), loc="lower right", bbox_to_anchor=(1.0, 1.0))
    inner = grid[2, :].subgridspec(1, 2, wspace=0.25)
    accuracy, macs = figure.add_subplot(inner[0]), figure.add_subplot(inner[1])
    for run in runs:
        accuracy.plot([100 * a for a in run["accuracy_by_frame"]], "-o", ms=3, label=run["name"])
        macs.plot(run["macs_by_frame"], "-o", ms=3, label=run["name"])
    accuracy.set_ylabel("test accuracy (%)"), macs.set_ylabel("mean MACs per frame")
    for ax in (accuracy, macs):
        ax.set_xlabel("frame")
        ax.grid(alpha=0.3)
    macs.legend(fontsize=7)
    return figure
