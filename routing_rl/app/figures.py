"""Figures from finished run directories: the data behind them as CSV, the pictures as PNG.

``write_figures(run_dirs, out_dir)`` reads each run's ``metrics.json`` and writes, for the
runs of one task (see :func:`by_task`), into ``out_dir``, or for runs of several tasks, into
one subfolder of ``out_dir`` per task (a run is only ever drawn beside, and judged against,
the static nets of its own task):

* ``accuracy_macs.png`` / ``.csv`` — every run's test points (static curve, learners, the
  dynamic-k_cpt net's curve, threshold budgets, SB3 baselines);
* ``node_link.png`` — one row per run with routing (fixed k_cpt), plus one per k_cpt for
  dynamic-k_cpt nets;
* ``routing_heatmap.png`` / ``.csv`` — validation exits over training, per routed run;
* ``report.md`` — the table of test points against the static curve, the reproduction's
  targets and the exits by source (:mod:`routing_rl.app.report`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt

from routing_rl.app.cli import _Parser
from routing_rl.app.plots import accuracy_macs_figure, node_link_figure, routing_heatmap_figure, write_csv
from routing_rl.app.report import STATIC_SERIES, markdown_report
from routing_rl.app.runs import METRICS_FILE
from routing_rl.core.files import folder_problem
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


REQUIRED = ("run", "agent", "arch", "k_cpt", "test", "structure", "history")
"""What every finished run's ``metrics.json`` holds that the figures read."""
WHERE_FOUND = ("path", "found_in", "layout")
"""Where a dataset's source was read from: not part of the task (the same data in another
folder or layout is the same task)."""


def read_metrics(run_dirs: list[Path]) -> list[dict]:
    """The metrics of every finished run; ValueError naming the runs that have not finished,
    or the first ``metrics.json`` that is not a finished run's metrics and what it lacks."""
    runs, unfinished = [], []
    for run_dir in map(Path, run_dirs):
        path = run_dir / METRICS_FILE
        if path.is_file():
            runs.append(_load_metrics(path))
        else:
            unfinished.append(str(run_dir))
    if unfinished:
        raise ValueError(f"no {METRICS_FILE} in {', '.join(unfinished)}: those runs have not finished (resume them, or leave them out)")
    return runs


def _load_metrics(path: Path) -> dict:
    fix = "resume the run to write it again, or leave the run out"
    try:
        metrics = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} cannot be read as JSON ({error}); {fix}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"{path} holds a JSON {type(metrics).__name__}, not a run's metrics object; {fix}")
    missing = [key for key in REQUIRED if key not in metrics]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: it is not a finished run's metrics; {fix}")
    tests = metrics["test"]
    if not (isinstance(tests, list) and tests and all(isinstance(t, dict) and _is_number(t.get("accuracy"))
                                                       and _is_number(t.get("mean_macs")) for t in tests)):
        raise ValueError(f"{path}: its test evaluations lack an accuracy or mean MACs; {fix}")
    if not (isinstance(metrics["structure"], dict) and {"nodes", "junctions"} <= set(metrics["structure"])):
        raise ValueError(f"{path}: its structure lacks nodes or junctions; {fix}")
    return metrics


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def task_key(run: dict) -> str:
    """What makes two runs comparable, as a string: the env id and the dataset's description
    (classes, sizes, splits, preprocessing), less where its files were found."""
    env = _env(run)
    dataset = run.get("dataset")
    if isinstance(dataset, dict):
        dataset = {k: v for k, v in dataset.items() if k != "format_version"}
        if isinstance(dataset.get("sources"), dict):
            dataset["sources"] = {kind: {k: v for k, v in info.items() if k not in WHERE_FOUND}
                                  if isinstance(info, dict) else info for kind, info in dataset["sources"].items()}
    return json.dumps([env, dataset], sort_keys=True)


def by_task(runs: list[dict]) -> dict[str, list[dict]]:
    """``runs`` grouped by :func:`task_key`, each group under a folder-safe name: the
    dataset's (``hybrid``), led by the env's id where tasks of different envs share a dataset
    name, numbered (``hybrid-2``) where they still collide; in order of first appearance."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        groups.setdefault(task_key(run), []).append(run)
    dataset = {key: _dataset_name(group[0]) for key, group in groups.items()}
    env = {key: str(_env(group[0]) or "env").rsplit("/", 1)[-1] for key, group in groups.items()}
    named: dict[str, list[dict]] = {}
    for key, group in groups.items():
        envs = {env[other] for other in groups if dataset[other] == dataset[key]}
        base = f"{env[key]}-{dataset[key]}" if len(envs) > 1 else dataset[key]
        name, number = base, 1
        while name in named:
            number += 1
            name = f"{base}-{number}"
        named[name] = group
    return named


def _env(run: dict) -> str | None:
    return run.get("env") or run.get("config", {}).get("env")


def _dataset_name(run: dict) -> str:
    dataset = run.get("dataset")
    name = dataset.get("name") if isinstance(dataset, dict) else None
    name = name or run.get("config", {}).get("dataset") or "task"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", str(name)).strip("-.") or "task"


def task_label(run: dict) -> str:
    """``env on dataset (N train / M test examples)`` of a run's task, for titles and reports."""
    env = _env(run) or "an unnamed env"
    dataset = run.get("dataset") if isinstance(run.get("dataset"), dict) else {}
    sizes = dataset.get("sizes") or {}
    counted = f" ({sizes['train']} train / {sizes['test']} test examples)" if {"train", "test"} <= set(sizes) else ""
    return f"{env} on {dataset.get('name') or run.get('config', {}).get('dataset') or 'its dataset'}{counted}"


def check_out_folder(out_dir: Path, flag: str = "--out") -> None:
    """ValueError when ``out_dir`` cannot be a folder (it, or a folder above it, is a file)."""
    problem = folder_problem(out_dir)
    if problem:
        raise ValueError(f"{flag} {problem}; choose another {flag}")


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
    """Write the figures and their CSVs into ``out_dir`` (one subfolder per task when the runs
    are of several tasks); returns the paths written. ValueError, before anything is
    written, when a run has not finished or ``out_dir`` cannot be a folder."""
    out_dir = Path(out_dir)
    check_out_folder(out_dir)
    runs = read_metrics(run_dirs)
    tasks = by_task(runs)
    if len(tasks) == 1:
        return _write_task(runs, out_dir, title)
    written = []
    for name, group in tasks.items():
        label = task_label(group[0])
        written += _write_task(group, out_dir / name, f"{title} ({label})" if title else label)
    return written


def _write_task(runs: list[dict], out_dir: Path, title: str) -> list[Path]:
    """The figures of runs of one task."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    points = test_points(runs)
    write_csv(out_dir / "accuracy_macs.csv", points)
    figure = accuracy_macs_figure(points, title)
    figure.savefig(out_dir / "accuracy_macs.png", dpi=120)
    plt.close(figure)
    (out_dir / "report.md").write_text(markdown_report(runs, points, task_label(runs[0])))
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
    parser = _Parser(prog=prog, description="Redraw the paper's figures from finished runs (one folder per task "
                     "when the runs are of several tasks).")
    parser.add_argument("runs", nargs="+", help="run directories (each with a metrics.json)")
    parser.add_argument("--out", default="figures", help="folder for the PNGs and CSVs (default: figures)")
    parser.add_argument("--title", default="", help="title of the accuracy/MACs plot")
    args = parser.parse_args(argv)
    return write_or_exit(parser, args.out, lambda: write_figures(args.runs, args.out, args.title))


def write_or_exit(parser, out: str | Path, write) -> int:
    """``write()``, then print the paths it returns (exit status 0); a ValueError, or an OSError
    writing into ``out``, ends the command with one line and exit status 2."""
    try:
        written = write()
    except ValueError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except OSError as error:
        parser.exit(2, f"{parser.prog}: error: cannot write into --out {out}: {error.strerror or error}; choose another --out\n")
    print("\n".join(map(str, written)))
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m routing_rl.app.figures"))
