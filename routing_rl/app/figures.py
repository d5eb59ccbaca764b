"""Figures from finished run directories: the data behind them as CSV, the pictures as PNG.

``write_figures(run_dirs, out_dir)`` reads each run's ``metrics.json`` and writes:

* ``accuracy_macs.png`` / ``.csv`` — every run's test points (static curve, learners, the
  dynamic-k_cpt net's curve, threshold budgets, SB3 baselines);
* ``node_link.png`` — one row per run with routing (fixed k_cpt), plus one per k_cpt for
  dynamic-k_cpt nets;
* ``routing_heatmap.png`` / ``.csv`` — validation exits over training, per routed run;
* ``report.md`` — the table of test points against the static curve, the reproduction's
  targets and the exits by source (:mod:`routing_rl.app.report`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib.pyplot as plt

from routing_rl.app.plots import accuracy_macs_figure, node_link_figure, routing_heatmap_figure, write_csv
from routing_rl.app.report import STATIC_SERIES, markdown_report
from routing_rl.app.runs import METRICS_FILE
from routing_rl.training.config import AGENT_ALIASES

SERIES = {
    "static": STATIC_SERIES,
    "actor": "actor",
    "pragmatic-critic": "pragmatic critic",
    "optimistic-critic": "optimistic critic",
    "threshold": "confidence threshold",
    "dqn": "DQN",
    "ppo": "PPO",
    "a2c": "A2C",
}


def read_metrics(run_dirs: list[Path]) -> list[dict]:
    """The metrics of every finished run; unfinished ones are named in the error."""
    runs, unfinished = [], []
    for run_dir in map(Path, run_dirs):
        path = run_dir / METRICS_FILE
        if path.is_file():
            runs.append(json.loads(path.read_text()))
        else:
            unfinished.append(str(run_dir))
    if unfinished:
        raise ValueError(f"no {METRICS_FILE} in {', '.join(unfinished)}: those runs have not finished (resume them, or leave them out)")
    return runs


def series_name(run: dict) -> str:
    agent = AGENT_ALIASES.get(run["agent"], run["agent"])  # runs written before the rename say "critic"
    name = SERIES.get(agent, agent)
    if run["k_cpt"] == "dynamic":
        name += ", dynamic k_cpt"
    if run["arch"] == "tree":
        name += " (tree)"
    return name


def test_points(runs: list[dict]) -> list[dict]:
    points = []
    for run in runs:
        for evaluation in run["test"]:
            points.append(
                {
                    "series": series_name(run),
                    "run": run["run"],
                    "arch": run["arch"],
                    "k_cpt": evaluation.get("k_cpt"),
                    "label": evaluation.get("label", ""),
                    "accuracy": evaluation["accuracy"],
                    "mean_macs": evaluation["mean_macs"],
                }
            )
    return points


def write_figures(run_dirs: list[Path], out_dir: Path, title: str = "") -> list[Path]:
    """Write the figures and their CSVs into ``out_dir``; returns the paths written."""
    runs = read_metrics(run_dirs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    points = test_points(runs)
    write_csv(out_dir / "accuracy_macs.csv", points)
    figure = accuracy_macs_figure(points, title)
    figure.savefig(out_dir / "accuracy_macs.png", dpi=120)
    plt.close(figure)
    (out_dir / "report.md").write_text(markdown_report(runs, points))
    written += [out_dir / "accuracy_macs.csv", out_dir / "accuracy_macs.png", out_dir / "report.md"]

    routed = [run for run in runs if run["structure"]["junctions"]]
    rows = []
    for run in routed:
        for evaluation in run["test"]:
            label = series_name(run) + (f"\nk_cpt={run['k_cpt']}" if run["k_cpt"] != "dynamic" else f"\nk_cpt={evaluation['k_cpt']}")
            rows.append((label, run["structure"], evaluation))
    if rows:
        figure = node_link_figure(rows)
        figure.savefig(out_dir / "node_link.png", dpi=120)
        plt.close(figure)
        written.append(out_dir / "node_link.png")

    heat_rows, heat_csv = [], []
    for run in routed:
        history = run["history"]
        if not history:
            continue
        leaves = list(history[0]["evaluations"][0]["leaves"])
        iterations = [entry["iteration"] for entry in history]
        fractions = [[entry["evaluations"][0]["leaves"][leaf]["fraction"] for leaf in leaves] for entry in history]
        heat_rows.append((f"{series_name(run)}, k_cpt={run['k_cpt']}", leaves, iterations, fractions))
        for iteration, row in zip(iterations, fractions):
            heat_csv.append({"run": run["run"], "iteration": iteration, **dict(zip(leaves, row))})
    if heat_rows:
        write_csv(out_dir / "routing_heatmap.csv", heat_csv)
        figure = routing_heatmap_figure(heat_rows)
        figure.savefig(out_dir / "routing_heatmap.png", dpi=120)
        plt.close(figure)
        written += [out_dir / "routing_heatmap.csv", out_dir / "routing_heatmap.png"]
    return written


def main(argv: list[str] | None = None, prog: str = "figures.py") -> int:
    """The figures' command line: ``RUN_DIR ... --out FOLDER``."""
    parser = argparse.ArgumentParser(prog=prog, description="Redraw the paper's figures from finished runs.")
    parser.add_argument("runs", nargs="+", help="run directories (each with a metrics.json)")
    parser.add_argument("--out", default="figures", help="folder for the PNGs and CSVs (default: figures)")
    parser.add_argument("--title", default="", help="title of the accuracy/MACs plot")
    args = parser.parse_args(argv)
    try:
        written = write_figures(args.runs, args.out, args.title)
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {error}\n")
    print("\n".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m routing_rl.app.figures"))
