"""Figures from finished run directories: the data behind them as CSV, the pictures as PNG.

``write_figures(run_dirs, out_dir)`` reads each run's ``metrics.json`` (a folder given twice
once) and writes, for the runs of one task and test set (see :func:`by_task`), into
``out_dir``, or else into one subfolder of ``out_dir`` per task and test set (a run is only
ever drawn beside, and judged against, the static nets of its own task, tested on the same
examples):

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
import math
import re
import sys
from pathlib import Path

import matplotlib.pyplot as plt

from routing_rl.app.cli import _Parser
from routing_rl.app.frontier import test_subset
from routing_rl.app.plots import (accuracy_macs_figure, layout, mix_legend, mixes_sources, node_link_figure,
                                  routing_heatmap_figure, write_csv)
from routing_rl.app.report import STATIC_SERIES, markdown_report
from routing_rl.app.runs import METRICS_FILE
from routing_rl.core.files import folder_problem, read_json
from routing_rl.training.learners import canonical_name

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
    """The metrics of every finished run, a run given twice (the same folder by another path)
    read once; ValueError naming the runs that have not finished, or the first
    ``metrics.json`` that is not a finished run's metrics and what is wrong with it."""
    runs, unfinished = [], []
    for run_dir in distinct(run_dirs):
        path = run_dir / METRICS_FILE
        if path.is_file():
            runs.append(_load_metrics(path))
        else:
            unfinished.append(str(run_dir))
    if unfinished:
        raise ValueError(f"no {METRICS_FILE} in {', '.join(unfinished)}: those runs have not finished (resume them, or leave them out)")
    return runs


def distinct(run_dirs: list[Path]) -> list[Path]:
    """``run_dirs`` without the folders given before (by their resolved paths), in order."""
    seen: set[Path] = set()
    kept = []
    for run_dir in map(Path, run_dirs):
        if run_dir.resolve() not in seen:
            seen.add(run_dir.resolve())
            kept.append(run_dir)
    return kept


def _load_metrics(path: Path) -> dict:
    fix = "resume the run to write it again, or leave the run out"
    try:
        metrics = read_json(path)
    except (OSError, ValueError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ValueError(f"{path} cannot be read as JSON ({error}); {fix}") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"{path} holds a JSON {type(metrics).__name__}, not a run's metrics object; {fix}")
    missing = [key for key in REQUIRED if key not in metrics]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: it is not a finished run's metrics; {fix}")
    tests = metrics["test"]
    if not (isinstance(tests, list) and tests and all(isinstance(t, dict) and "accuracy" in t and "mean_macs" in t
                                                       for t in tests)):
        raise ValueError(f"{path}: its test evaluations lack an accuracy or mean MACs; {fix}")
    structure = metrics["structure"]
    if not (isinstance(structure, dict) and isinstance(structure.get("nodes"), list)
            and isinstance(structure.get("junctions"), (int, list)) and not isinstance(structure["junctions"], bool)):
        raise ValueError(f"{path}: its structure lacks nodes or junctions; {fix}")
    problem = _drawing_problem(metrics)
    if problem:
        raise ValueError(f"{path}: {problem}; {fix}")
    return metrics


class _Undrawable(ValueError):
    """What in a run's metrics cannot be drawn, as ``its <field> is <value>, not <kind>``."""


def _finite(value, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Undrawable(f"its {where} is {json.dumps(value)[:40]}, not a finite number")


def _drawing_problem(run: dict) -> str | None:
    """Why the figures and the report cannot draw a finished run's metrics, or None: its
    names, numbers (a NaN accuracy is a failed evaluation), net structure and routing."""
    try:
        for key in ("run", "agent", "arch"):
            if not isinstance(run[key], str) or not run[key]:
                raise _Undrawable(f"its {key} is {json.dumps(run[key])[:40]}, not a name")
        if run["k_cpt"] != "dynamic":
            _finite(run["k_cpt"], "k_cpt")
        if not isinstance(run.get("sources", []), list) or not all(isinstance(s, str) for s in run.get("sources", [])):
            raise _Undrawable("its sources are not a list of names")
        for i, evaluation in enumerate(run["test"]):
            _finite(evaluation["accuracy"], f"test[{i}] accuracy")
            _finite(evaluation["mean_macs"], f"test[{i}] mean_macs")
            if evaluation.get("k_cpt") is not None:
                _finite(evaluation["k_cpt"], f"test[{i}] k_cpt")
            if not isinstance(evaluation.get("label", ""), str):
                raise _Undrawable(f"its test[{i}] label is not a string")
        for _, structure, evaluation in node_link_rows(run):  # what the node-link diagram reads
            layout(structure)
            mix_legend(evaluation)
            mix = "by_source" if mixes_sources(evaluation) else "by_class"
            for name, leaf in evaluation["leaves"].items():
                _finite(leaf["count"], f"test leaf {name} count")
                _finite(leaf["fraction"], f"test leaf {name} fraction")
                if leaf["accuracy"] is not None:
                    _finite(leaf["accuracy"], f"test leaf {name} accuracy")
                for kind, count in leaf[mix].items():
                    _finite(count, f"test leaf {name} count of {kind}")
        heat = heat_rows(run)
        for row in heat[1] if heat else []:
            for leaf in heat[0][1]:
                _finite(row[leaf], f"history leaf {leaf} fraction at iteration {row['iteration']}")
    except _Undrawable as problem:
        return str(problem)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError, StopIteration) as error:
        return f"its structure, routing or history cannot be drawn ({type(error).__name__}: {error})"
    return None


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
    """``runs`` grouped by :func:`task_key` and the test examples they were judged on
    (:func:`~routing_rl.app.frontier.test_subset`), each group under a folder-safe name: the
    dataset's (``hybrid``), led by the env's id where tasks of different envs share a dataset
    name, followed by the test examples where runs of one task were tested on different ones
    (``hybrid-test-all``, ``hybrid-test-64-seed-0``), numbered (``hybrid-2``) where they still
    collide; in order of first appearance."""
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((task_key(run), test_subset(run)), []).append(run)
    dataset = {key: _dataset_name(group[0]) for key, group in groups.items()}
    env = {key: str(_env(group[0]) or "env").rsplit("/", 1)[-1] for key, group in groups.items()}
    named: dict[str, list[dict]] = {}
    for key, group in groups.items():
        envs = {env[other] for other in groups if dataset[other] == dataset[key]}
        base = f"{env[key]}-{dataset[key]}" if len(envs) > 1 else dataset[key]
        if sum(other[0] == key[0] for other in groups) > 1:
            base += "-test-all" if key[1] is None else f"-test-{key[1][0]}-seed-{key[1][1]}"
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
    """``env on dataset (N train / M test examples)`` of a run's task, for titles and reports;
    a run judged on a drawn subset of the test split says so (``N train / 64 of M test
    examples, seed 0``)."""
    env = _env(run) or "an unnamed env"
    dataset = run.get("dataset") if isinstance(run.get("dataset"), dict) else {}
    sizes = dataset.get("sizes") or {}
    subset = test_subset(run)
    counts = []
    if {"train", "test"} <= set(sizes):
        drawn = "" if subset is None else f"{subset[0]} of "
        counts.append(f"{sizes['train']} train / {drawn}{sizes['test']} test examples")
    elif subset is not None:
        counts.append(f"{subset[0]} test examples")
    if subset is not None:
        counts.append(f"seed {subset[1]}")
    counted = f" ({', '.join(counts)})" if counts else ""
    return f"{env} on {dataset.get('name') or run.get('config', {}).get('dataset') or 'its dataset'}{counted}"


def check_out_folder(out_dir: Path, flag: str = "--out") -> None:
    """ValueError when ``out_dir`` cannot be a folder (it, or a folder above it, is a file)."""
    problem = folder_problem(out_dir)
    if problem:
        raise ValueError(f"{flag} {problem}; choose another {flag}")


def series_name(run: dict) -> str:
    agent = canonical_name(run["agent"])  # runs written before the rename say "critic"
    name = SERIES.get(agent, agent)
    if run["k_cpt"] == "dynamic":
        name += ", dynamic k_cpt"
    if run["arch"] == "tree":
        name += " (tree)"
    if isinstance(run.get("config"), dict) and run["config"].get("exit_confidence"):
        name += ", reading exit confidence"  # routers that also read their heads' confidence: another learner's curve
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


def node_link_rows(run: dict) -> list[tuple[str, dict, dict]]:
    """The node-link diagram's rows of a run with routing (none without): ``(label,
    structure, evaluation)``, one per test evaluation."""
    if not run["structure"]["junctions"]:
        return []
    return [(series_name(run) + f"\nk_cpt={run['k_cpt'] if run['k_cpt'] != 'dynamic' else evaluation['k_cpt']}",
             run["structure"], evaluation) for evaluation in run["test"]]


def heat_rows(run: dict) -> tuple[tuple, list[dict]] | None:
    """The routing heat map's row of a run with routing and a validation history (None
    otherwise): ``(label, leaves, iterations, fractions)``, and its CSV lines."""
    history = run["history"]
    if not run["structure"]["junctions"] or not history:
        return None
    leaves = list(history[0]["evaluations"][0]["leaves"])
    iterations = [entry["iteration"] for entry in history]
    fractions = [[entry["evaluations"][0]["leaves"][leaf]["fraction"] for leaf in leaves] for entry in history]
    lines = [{"run": run["run"], "iteration": iteration, **dict(zip(leaves, row))} for iteration, row in zip(iterations, fractions)]
    return (f"{series_name(run)}, k_cpt={run['k_cpt']}", leaves, iterations, fractions), lines


def write_figures(run_dirs: list[Path], out_dir: Path, title: str = "") -> list[Path]:
    """Write the figures and their CSVs into ``out_dir`` (one subfolder per task and test set
    when the runs are of several, :func:`by_task`); returns the paths written. ValueError,
    before anything is written, when a run has not finished, its metrics cannot be drawn, or
    ``out_dir`` cannot be a folder."""
    out_dir = Path(out_dir)
    check_out_folder(out_dir)
    runs = read_metrics(run_dirs)
    tasks = by_task(runs)
    if len(tasks) == 1:
        return _write_task(runs, out_dir, title)
    if len({task_key(group[0]) for group in tasks.values()}) < len(tasks):
        print("note: runs of one task judged on different test examples are drawn apart: " + "; ".join(
            f"{name} ({', '.join(Path(run['run']).name for run in group)})" for name, group in tasks.items()), file=sys.stderr)
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

    rows = [row for run in runs for row in node_link_rows(run)]
    if rows:
        figure = node_link_figure(rows)
        figure.savefig(out_dir / "node_link.png", dpi=120)
        plt.close(figure)
        written.append(out_dir / "node_link.png")

    heat = [found for found in map(heat_rows, runs) if found]
    if heat:
        write_csv(out_dir / "routing_heatmap.csv", [line for _, lines in heat for line in lines])
        figure = routing_heatmap_figure([row for row, _ in heat])
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
