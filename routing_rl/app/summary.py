"""The one-screen summary ``experiments/train_agent.py`` prints when a run ends.

Accuracy and mean MACs on the test split, where the test images of each source (MNIST
digits, CIFAR images) leave the net, the mean cost of inference beside the cheapest exit of the
same net used alone, and where the point stands against the static frontier
(:mod:`routing_rl.app.frontier`) of that task's static nets: those finished beside the run
(same logdir, task, schedule, seed and test examples), else, on hybrid, the static nets
measured at the run's preset (:data:`STATIC_REFERENCES`) if it kept that preset's schedule and
whole test split: a run is judged against static nets trained on the same images for as long,
never a longer schedule's.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from routing_rl.app.frontier import SCHEDULE, comparable, frontier_accuracy, static_frontier, test_subset
from routing_rl.core.files import read_json
from routing_rl.training.config import PRESET_VALUES, TrainConfig

STATIC_REFERENCES = {
    "cpu-small": ("the reproduction's static nets, hybrid, preset cpu-small, seed 0 (docs/reproduction.md)", (
        ("static-1", 0.9118, 1.36e6),
        ("static-2", 0.9371, 5.27e6),
        ("static-3", 0.9508, 7.56e6),
        ("static-4", 0.9469, 11.39e6),
        ("static-5", 0.9454, 13.46e6),
        ("static-6", 0.9425, 17.00e6),
        ("static-7", 0.9435, 18.19e6),
        ("static-8", 0.9347, 20.55e6),
    )),
    "quick": ("the task suite's static nets, hybrid, preset quick, seed 0 (docs/suite.md)", (
        ("static-1", 0.8538, 1.36e6),
        ("static-2", 0.9025, 5.27e6),
        ("static-3", 0.9103, 7.56e6),
        ("static-5", 0.9264, 13.46e6),
        ("static-6", 0.9181, 17.00e6),
        ("static-7", 0.9050, 18.19e6),
    )),
}
"""Preset: (where the numbers come from, its static nets on hybrid as (net, test accuracy,
mean MACs)), seed 0, each net at the learning rate its validation chose: ``cpu-small`` the
paper reproduction's run records (``docs/results/runs/reproduction-cpu-small``; a test keeps
them equal), ``quick`` the task suite's (docs/suite.md)."""
SOURCE_NAMES = {"mnist": "digits", "cifar": "CIFAR"}


def inference_cost(accuracy: float, mean_macs: float, k_cpt: float) -> float:
    """Mean cost of inference per example: 0/1 error plus k_cpt × MACs."""
    return (1 - accuracy) + k_cpt * mean_macs


def best_single_exit(evaluation: dict) -> tuple[str, float] | None:
    """``(leaf, cost)``: the leaf whose use alone (every example sent there) costs least per
    example at the evaluation's k_cpt, from its ``heads_alone``
    (:func:`~routing_rl.training.evaluate.heads_alone`); None without them."""
    alone, k_cpt = evaluation.get("heads_alone"), evaluation.get("k_cpt")
    if not alone or k_cpt is None:
        return None
    costs = {leaf: inference_cost(v["accuracy"], v["macs"], k_cpt) for leaf, v in alone.items()}
    leaf = min(costs, key=costs.get)
    return leaf, costs[leaf]


def cost_line(evaluation: dict) -> list[str]:
    """The routing's mean cost of inference beside the cheapest single exit's: a router that
    sends everything to one exit is right only if it picked that one."""
    best = best_single_exit(evaluation)
    if best is None:
        return []
    leaf, cost = best
    alone = evaluation["heads_alone"][leaf]
    routed = inference_cost(evaluation["accuracy"], evaluation["mean_macs"], evaluation["k_cpt"])
    return [f"  cost of inference {routed:.4f} (0/1 error + k_cpt x MACs); the cheapest exit alone: {leaf}, "
            f"{100 * alone['accuracy']:.2f}% at {alone['macs'] / 1e6:.2f}M MACs, {cost:.4f}"]


def exits_line(evaluation: dict) -> list[str]:
    """Per source (MNIST/CIFAR on the paper's data; whatever sources a plug-in task names):
    how many test examples leave at each exit, and their mean MACs."""
    lines, leaves = [], evaluation.get("leaves")
    if not isinstance(leaves, dict) or not leaves:  # a metrics.json written without them
        return lines
    sources = next(iter(leaves.values()))["by_source"]
    for source in sources:
        counts = [(leaf, v["by_source"][source], v["macs"]) for leaf, v in evaluation["leaves"].items()]
        total = sum(count for _, count, _ in counts)
        if not total:
            continue
        mean_macs = sum(count * macs for _, count, macs in counts) / total
        where = ", ".join(f"{leaf} {count}" for leaf, count, _ in counts if count)
        lines.append(f"  {SOURCE_NAMES.get(source, source):>7} ({total}): {where}; mean {mean_macs / 1e6:.2f}M MACs")
    return lines


def static_beside(metrics: dict, warn=lambda line: print(line, file=sys.stderr)) -> list[tuple[str, float, float]]:
    """(net, test accuracy, mean MACs) of the finished static runs in the run's logdir that
    share its task, schedule, seed and test examples (:func:`~routing_rl.app.frontier.comparable`);
    a metrics.json there that cannot be read as a run's is skipped with ``warn(line)``."""
    found = []
    for path in sorted(Path(metrics["run"]).parent.glob("*/metrics.json")):
        try:
            other = read_json(path)
            if other["agent"] == "static" and comparable(metrics, other):
                point = float(other["test_accuracy"]), float(other["test_mean_macs"])
                if not all(map(math.isfinite, point)):
                    raise ValueError(f"its test accuracy and mean MACs are {point[0]} and {point[1]}")
                found.append((other["arch"], *point))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            why = f"it has no {error}" if isinstance(error, KeyError) else str(error) or type(error).__name__
            warn(f"warning: {path} is not a run's metrics ({why}); skipping it as a static reference")
    return found


def on_preset_schedule(metrics: dict) -> bool:
    """Whether a run trained on its preset's own schedule and was tested on the whole test
    split, as the :data:`STATIC_REFERENCES` nets were (a config field the run lacks counts as the preset's)."""
    config = metrics["config"]
    preset = {**{name: getattr(TrainConfig, name) for name in SCHEDULE}, **PRESET_VALUES[config["preset"]],
              "preset": config["preset"]}
    return test_subset(metrics) is None and all(config.get(k, preset[k]) == preset[k] for k in SCHEDULE)


def static_line(accuracy: float, mean_macs: float, static: list[tuple[str, float, float]]) -> str:
    """Where a point stands against the static frontier of ``static`` (net, accuracy, MACs)."""
    frontier = static_frontier((macs, acc) for _, acc, macs in static)
    names = [next(name for name, acc, macs in static if (macs, acc) == point) for point in frontier]
    line = f"  static frontier ({', '.join(names)})"
    at = frontier_accuracy(frontier, mean_macs)
    if at is None:
        return line + f": no static net as cheap as {mean_macs / 1e6:.2f}M MACs"
    return line + f" at {mean_macs / 1e6:.2f}M MACs: {100 * at:.2f}%, this net {100 * (accuracy - at):+.2f} pts"


def summary_text(metrics: dict, static: list[tuple[str, float, float]] | None = None) -> str:
    """The summary of a finished run's ``metrics.json`` content, a few lines per test point;
    ``static``: the (net, accuracy, MACs) to judge it against (default: see the module docstring)."""
    config = metrics["config"]
    policy = config.get("learner_options", {}).get("policy", config.get("policy"))  # runs of before the nesting: flat
    policy = f", {policy or 'default'} policy" if metrics["agent"] not in ("static", "threshold") else ""
    lines = [
        f"run {metrics['run']}: {metrics['agent']} on {metrics['arch']}{policy}, preset {config.get('preset')}, "
        f"{metrics['train_seconds']:.0f} s of training",
    ]
    source = "the static runs beside this one"
    if static is None:
        static = static_beside(metrics)
    hybrid = isinstance(metrics.get("dataset"), dict) and metrics["dataset"].get("name") == "hybrid"
    if not static and hybrid and config.get("preset") in STATIC_REFERENCES and on_preset_schedule(metrics):
        source, static = STATIC_REFERENCES[config["preset"]]
    for evaluation in metrics["test"]:
        label = evaluation.get("label") or (f"k_cpt {evaluation['k_cpt']:g}" if evaluation.get("k_cpt") is not None else "")
        lines.append(
            f"test accuracy {100 * evaluation['accuracy']:.2f}% at {evaluation['mean_macs'] / 1e6:.2f}M MACs per image"
            + (f" ({label})" if label else "")
        )
        lines += exits_line(evaluation)
        lines += cost_line(evaluation)
        if static and metrics["agent"] != "static":
            lines.append(static_line(evaluation["accuracy"], evaluation["mean_macs"], static))
    if static and metrics["agent"] != "static":
        lines.append(f"  (static nets: {source})")
    return "\n".join(lines)
