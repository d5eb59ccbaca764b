"""The task suite: train one learner over several tasks and judge it on each against that
task's static frontier and its tuned confidence threshold.

Per task (a dataset of :data:`SUITE`, run in ``<logdir>/<task>``) and seed, through
:func:`~routing_rl.app.sweep.run_sweep` (resumable: finished runs are skipped, interrupted
ones resumed; on local worker processes or Ray, each step's runs over every task and seed
in one sweep so that the workers share them):

1. the static nets' learning rates: given (one or several), or one chosen on validation
   (:func:`~routing_rl.app.sweep.select_static_lr`);
2. static nets with 1, 2, ... columns, until :data:`STATIC_PATIENCE` nets in a row do not beat
   the best shallower one (deeper nets would not change the frontier: it is flat past its best);
   each net at every learning rate, its point the one with the best final validation accuracy;
3. the confidence threshold at every learning rate; at each k_cpt its point is the (learning
   rate, budget) whose validation cost is lowest;
4. the learner at every k_cpt.

Each (task, k_cpt) row, averaged over the seeds: test accuracy, mean MACs, accuracy points
over the static frontier (:mod:`routing_rl.app.frontier`), the mean cost of inference
(0/1 error + k_cpt × MACs per example) beside the tuned threshold's and beside the cheapest
exit of the learner's own net used alone (a learner that sends everything to one exit has
routed well only if that is the one), validation accuracy minus test accuracy, and the share
of each source's test examples leaving at each exit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from routing_rl.app.frontier import frontier_margin, static_frontier
from routing_rl.app.runs import METRICS_FILE, RunError, final_validation_accuracy
from routing_rl.app.sweep import (LR_CANDIDATES, STATIC_LRS, add_backend_arguments, add_schedule_arguments, backend,
                                  exit_status, fields, run_sweep, schedule_fields, select_static_lr, static_lr_flag,
                                  sweep_configs)
from routing_rl.app.summary import SOURCE_NAMES, best_single_exit, inference_cost
from routing_rl.core.files import atomic_write_text, file_problem
from routing_rl.core.memory import retain_freed_memory
from routing_rl.data import DataNotFoundError
from routing_rl.data.datasets import DATASETS
from routing_rl.training.config import AGENTS, PRESETS, POLICIES, make_config
from routing_rl.training.learners import canonical_name

SUITE = ("hybrid", "cifar2", "cifar5", "cifar10", "hybrid-swap", "hybrid-even", "hybrid-train-mix",
         "hybrid-hard-digits")
"""The suite's tasks, by dataset name (each also a registered env id, see docs/suite.md)."""
WHERE_ONLY = ("device", "data_dir", "download")
"""Config fields that say where runs train and find their data, not how: left out of the results."""
SUITE_OWNED = ("agent", "policy", "k_cpt", "seed", "dataset", "env", "logdir", "run_name")
"""Config fields the suite sets per run itself; ``--learner-set`` refuses them."""
SET_BY_FLAG = {"agent": "--agent", "policy": "--policy", "k_cpt": "--k-cpts", "seed": "--seeds", "dataset": "--tasks",
               "env": "--tasks", "logdir": "--logdir", "preset": "--preset", "static_lr": "--static-lr",
               "lr": "--static-lr (static nets and threshold) or --learner-set lr=VALUE (learners)",
               "device": "--device", "data_dir": "--data-dir", "download": "--download",
               "validation_fraction": "--validation-fraction", "run_name": None}
"""Fields ``--set`` refuses, each with the flag that sets it (None: the suite names its runs)."""
STATIC_PATIENCE = 2
MAX_COLUMNS = 8


def learner_tag(learner_fields: dict) -> str:
    """The run-name suffix of learners trained with ``learner_fields`` (empty without), so
    that learners of other settings share a task's folder, static nets and threshold."""
    return "".join(f"-{name}={value if isinstance(value, str) else json.dumps(value)}"
                   for name, value in sorted(learner_fields.items()))


def check_tasks(tasks: Sequence[str]) -> list[str]:
    """``tasks`` if every one is a dataset name; ValueError naming the first that is not."""
    for task in tasks:
        if task not in DATASETS:
            raise ValueError(f"unknown suite task {task!r}; choose among {', '.join(SUITE)} (or {', '.join(d for d in DATASETS if d not in SUITE)})")
    if not tasks:
        raise ValueError(f"give at least one task; the suite's are {', '.join(SUITE)}")
    return list(tasks)


def _metrics(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / METRICS_FILE).read_text())


def flat(accuracies: Sequence[float], patience: int = STATIC_PATIENCE) -> bool:
    """Whether the last ``patience`` static nets were each no better than the best shallower one."""
    misses, best = 0, float("-inf")
    for accuracy in accuracies:
        misses = 0 if accuracy > best else misses + 1
        best = max(best, accuracy)
    return misses >= patience


def lr_tagged(config, lrs: Sequence[float]):
    """``config`` with ``-lr{lr:g}`` after its run name unless its lr is the first of ``lrs``
    (so a one-lr suite keeps the plain names)."""
    if config.lr != lrs[0]:
        config.run_name += f"-lr{config.lr:g}"
    return config


def train_static(where: dict[str, dict], seeds: Sequence[int], lr_of: dict[str, Sequence[float]], preset: str,
                 log: Callable, backend: dict) -> dict[tuple[str, int], list[dict]]:
    """Static nets with 1, 2, ... columns per (task, seed) until :func:`flat`; their metrics.

    Each net trains at every learning rate of its task, and the one with the best final
    validation accuracy is its point. Round ``c`` trains static-c for every (task, seed) still
    going in one sweep, so the backend's workers share the tasks' runs.
    """
    found = {(task, seed): [] for task in where for seed in seeds}
    for columns in range(1, MAX_COLUMNS + 1):
        going = [key for key, metrics in found.items() if not flat([m["test_accuracy"] for m in metrics])]
        if not going:
            break
        owners, configs = [], []
        for task, seed in going:
            for lr in lr_of[task]:
                (config,) = sweep_configs([], [], [seed], [columns], preset=preset, static_lr=lr, **where[task])
                configs.append(lr_tagged(config, lr_of[task]))
                owners.append((task, seed))
        chosen: dict[tuple[str, int], dict] = {}
        for owner, run_dir in zip(owners, run_sweep(configs, log, **backend)):
            metrics = _metrics(run_dir)
            if owner not in chosen or final_validation_accuracy(metrics) > final_validation_accuracy(chosen[owner]):
                chosen[owner] = metrics
        for owner, metrics in chosen.items():
            found[owner].append(metrics)
    return found


def threshold_cost(threshold: dict, k_cpt: float) -> tuple[float, dict]:
    """(test cost, test point) of the threshold budget (of any learning rate) whose validation cost
    at ``k_cpt`` is lowest."""
    point = min(threshold["test"], key=lambda p: inference_cost(p["validation_accuracy"], p["validation_mean_macs"], k_cpt))
    return inference_cost(point["accuracy"], point["mean_macs"], k_cpt), point


def exits_by_source(evaluation: dict) -> dict[str, dict[str, float]]:
    """``{source: {leaf: share of that source's test examples leaving there}}``, leaves reached only."""
    out = {}
    for source in next(iter(evaluation["leaves"].values()))["by_source"]:
        counts = {leaf: v["by_source"][source] for leaf, v in evaluation["leaves"].items()}
        total = sum(counts.values())
        if total:
            out[source] = {leaf: n / total for leaf, n in counts.items() if n}
    return out


def learner_point(metrics: dict, frontier: list, threshold: dict) -> dict:
    """One learner run's row at its k_cpt (see the module docstring)."""
    k_cpt = float(metrics["k_cpt"])
    test = metrics["test"][0]
    validation = final_validation_accuracy(metrics)
    reference, reference_point = threshold_cost(threshold, k_cpt)
    return {
        "run": metrics["run"],
        "agent": canonical_name(metrics["agent"]),  # runs saved before the rename say "critic"
        "k_cpt": k_cpt,
        "test_accuracy": test["accuracy"],
        "mean_macs": test["mean_macs"],
        "vs_frontier": frontier_margin(frontier, test["accuracy"], test["mean_macs"]),
        "cost": inference_cost(test["accuracy"], test["mean_macs"], k_cpt),
        "threshold_cost": reference,
        "threshold_budget": reference_point["budget"],
        "threshold_lr": reference_point["lr"],
        "validation_accuracy": validation,
        "validation_test_gap": None if validation is None else validation - test["accuracy"],
        "source_accuracy": test.get("source_accuracy", {}),
        "exits": exits_by_source(test),
        "best_single_exit": best_single_exit(test),
    }


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def average(points: list[dict]) -> dict:
    """The seeds' points of one (task, learner, k_cpt) row averaged; exits pooled."""
    row = {key: _mean([p[key] for p in points]) for key in
           ("test_accuracy", "mean_macs", "vs_frontier", "cost", "threshold_cost", "validation_test_gap")}
    exits: dict[str, dict[str, float]] = {}
    for p in points:
        for source, shares in p["exits"].items():
            for leaf, share in shares.items():
                exits.setdefault(source, {}).setdefault(leaf, 0.0)
                exits[source][leaf] += share / len(points)
    singles = [p.get("best_single_exit") for p in points]
    if all(singles):
        row["best_single_exit_cost"] = statistics.fmean(cost for _, cost in singles)
        row["best_single_exit"] = "/".join(sorted({leaf for leaf, _ in singles}))
    else:  # runs saved before heads_alone was measured
        row["best_single_exit_cost"], row["best_single_exit"] = None, None
    return {"agent": points[0]["agent"], "k_cpt": points[0]["k_cpt"], "seeds": len(points), **row, "exits": exits, "per_seed": points}


def run_suite(agents: Sequence[str], tasks: Sequence[str] = SUITE, k_cpts: Sequence[float] = (4e-9,), seeds: Sequence[int] = (0,),
              preset: str = "quick", policy: str | None = None, static_lr: Sequence[float] | str = STATIC_LRS,
              lr_candidates: Sequence[float] = LR_CANDIDATES, lr_iterations: int | None = None, logdir: str = "runs/suite",
              log: Callable = print, backend: dict | None = None, learner_fields: dict | None = None, **machine) -> dict:
    """Train and judge each of ``agents`` over ``tasks`` (see the module docstring); the
    results, JSON-ready, a row per (task, learner, k_cpt). The learners share the static nets
    and the threshold of each task and seed.

    ``static_lr``: ``"auto"`` (one chosen on validation per task) or learning rates to train each
    static net and the threshold at. ``backend``: where the runs train
    (:func:`~routing_rl.app.sweep.run_sweep`'s ``workers``, ``ray``, ``runs_per_gpu``;
    default: one after another in this process). ``machine``: further config
    fields shared by every run (``device``, ``data_dir``, ``iterations``, ``validation_fraction``...);
    ``learner_fields``: config fields of the learners only (``exit_confidence``, ``lr``...), over
    ``machine``'s, named in their run folders.
    """
    tasks = check_tasks(tasks)
    learner_fields = dict(learner_fields or {})
    owned = sorted(set(learner_fields) & set(SUITE_OWNED))
    if owned:
        raise RunError(f"the suite sets {', '.join(owned)} per run itself; drop it from --learner-set "
                       "(--agent, --policy, --k-cpts, --seeds, --tasks and --logdir choose them)")
    backend = backend or {}
    where = {task: dict(machine, dataset=task, logdir=str(Path(logdir) / task)) for task in tasks}
    for task in tasks:  # the learners' settings checked before the static nets train, not after
        sweep_configs(agents, k_cpts, seeds, preset=preset, policy=policy, **{**where[task], **learner_fields})
    lr_of = {}
    for task in tasks:
        if static_lr == "auto":
            log(f"== {task}: static learning rate")
            lr_of[task] = [select_static_lr(lr_candidates, lr_iterations, preset=preset, seed=seeds[0], log=log,
                                            backend=backend, **where[task])]
        else:
            lr_of[task] = list(static_lr)
    log("== static nets")
    static = train_static(where, seeds, lr_of, preset, log, backend)
    log(f"== threshold and {', '.join(agents)}")
    planned, configs = [], []
    for task in tasks:
        for seed in seeds:
            threshold = [lr_tagged(config, lr_of[task]) for lr in lr_of[task] for config in
                         sweep_configs(["threshold"], [k_cpts[0]], [seed], preset=preset, lr=lr, **where[task])]
            learners = sweep_configs(agents, k_cpts, [seed], preset=preset, policy=policy, **{**where[task], **learner_fields})
            for config in learners:  # learners with other policies or settings share the logdir (and its static nets)
                config.run_name += f"-{config.options.policy}{learner_tag(learner_fields)}"
            planned.append((task, seed, len(threshold), len(learners)))
            configs += threshold + learners
    run_dirs = iter(run_sweep(configs, log, **backend))
    results = {"agents": list(agents), "policy": policy, "preset": preset, "k_cpts": [float(k) for k in k_cpts],
               "seeds": list(seeds), "overrides": {k: v for k, v in machine.items() if v is not None and k not in WHERE_ONLY},
               "learner_overrides": learner_fields,
               "tasks": {task: {"static_lr": lr_of[task], "static": {}, "frontier": {}, "threshold": {}, "rows": []}
                         for task in tasks}}
    rows: dict[str, dict[tuple[str, float], list[dict]]] = {task: {} for task in tasks}
    for task, seed, lrs, count in planned:
        budgets = []  # every learning rate's budgets, each tagged with its rate
        for _ in range(lrs):
            metrics = _metrics(next(run_dirs))
            budgets += [dict(point, lr=metrics["config"]["lr"]) for point in metrics["test"]]
        threshold = {"test": budgets}
        frontier = static_frontier((m["test_mean_macs"], m["test_accuracy"]) for m in static[task, seed])
        for _ in range(count):
            point = learner_point(_metrics(next(run_dirs)), frontier, threshold)
            rows[task].setdefault((point["agent"], point["k_cpt"]), []).append(point)
        out = results["tasks"][task]
        out["frontier"][seed] = frontier
        out["static"][seed] = [{"arch": m["arch"], "lr": m["config"]["lr"], "test_accuracy": m["test_accuracy"], "mean_macs": m["test_mean_macs"],
                                "source_accuracy": m["test"][0].get("source_accuracy", {})} for m in static[task, seed]]
        out["threshold"][seed] = [{k: p.get(k) for k in ("lr", "label", "budget", "accuracy", "mean_macs", "validation_accuracy",
                                                     "validation_mean_macs")} for p in threshold["test"]]
    for task in tasks:
        results["tasks"][task]["rows"] = [average(points) for points in rows[task].values()]
    return results


def _exits_text(exits: dict[str, dict[str, float]]) -> str:
    parts = []
    for source, shares in exits.items():
        top = sorted(shares.items(), key=lambda s: -s[1])[:3]
        parts.append(f"{SOURCE_NAMES.get(source, source)} " + " ".join(f"{leaf}:{100 * s:.0f}%" for leaf, s in top))
    return "; ".join(parts)


def _single_text(row: dict) -> str:
    return "—" if row.get("best_single_exit_cost") is None else f"{row['best_single_exit']} {row['best_single_exit_cost']:.4f}"


def _number(value: float | None, pattern: str) -> str:
    return "—" if value is None else format(value, pattern)


def suite_table(results: dict) -> str:
    """The suite's results as one Markdown table, a row per (task, learner, k_cpt)."""
    lines = ["| task | learner | k_cpt | seeds | test accuracy | mean MACs | vs frontier (pts) | cost | threshold cost "
             "| cheapest exit alone | val − test (pts) | exits (top 3 per source) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for task, result in results["tasks"].items():
        for row in result["rows"]:
            gap = None if row["validation_test_gap"] is None else 100 * row["validation_test_gap"]
            lines.append(
                f"| {task} | {row['agent']} | {row['k_cpt']:g} | {row['seeds']} | {100 * row['test_accuracy']:.2f}% "
                f"| {row['mean_macs'] / 1e6:.2f}M | {_number(row['vs_frontier'], '+.2f')} | {row['cost']:.4f} "
                f"| {row['threshold_cost']:.4f} | {_single_text(row)} | {_number(gap, '+.2f')} | {_exits_text(row['exits'])} |")
    return "\n".join(lines)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Train learners over the task suite and judge them on "
                                     "every task against its static frontier and its tuned confidence threshold.")
    parser.add_argument("--agent", nargs="+", required=True, help="learners: " + ", ".join(a for a in AGENTS if a != "static")
                        + " (critic: pragmatic-critic); several share each task's static nets and threshold")
    parser.add_argument("--policy", default=None, choices=POLICIES, help="training routing policy (default: the agent's)")
    parser.add_argument("--preset", default="quick", choices=PRESETS, help="schedule of every run (default: quick)")
    add_schedule_arguments(parser)
    parser.add_argument("--learner-set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="config fields of the learners only, values in JSON (e.g. exit_confidence=true lr=0.02); "
                             "their run folders are named with them")
    parser.add_argument("--tasks", nargs="+", default=list(SUITE), help=f"suite tasks (default: {' '.join(SUITE)})")
    parser.add_argument("--k-cpts", nargs="+", type=float, default=[4e-9, 1.6e-8], help="k_cpt values (default: 4e-9 1.6e-8)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (default: 0)")
    parser.add_argument("--static-lr", nargs="+", type=static_lr_flag, default=list(STATIC_LRS),
                        help="learning rates of the static nets and the threshold; several: each trains at each, the best "
                             "on validation is its point; auto: one chosen on validation per task by static-8 trials "
                             f"(default: {' '.join(map(str, STATIC_LRS))})")
    parser.add_argument("--lr-candidates", nargs="+", type=float, default=list(LR_CANDIDATES),
                        help=f"learning rates --static-lr auto tries (default: {' '.join(map(str, LR_CANDIDATES))})")
    parser.add_argument("--lr-iterations", type=int, default=None,
                        help="iterations of each --static-lr auto trial (default: 400, or the runs' iterations when fewer)")
    parser.add_argument("--logdir", default="runs/suite", help="folder of the runs, one subfolder per task (default: runs/suite)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")
    parser.add_argument("--device", default="auto", help="torch device (default: auto)")
    parser.add_argument("--data-dir", default=None, help="folder with your data copies (default: $ROUTING_RL_DATA_DIR)")
    parser.add_argument("--download", type=lambda t: t.lower() in ("1", "true", "yes"), default=True,
                        help="try torchvision's downloaders when the data is not found (default: true)")
    parser.add_argument("--validation-fraction", type=float, default=None, help="share of the training split held out")
    add_backend_arguments(parser)
    return parser


def main(argv: list[str] | None = None, prog: str = "suite.py") -> int:
    """The suite command; exit status as :func:`~routing_rl.app.sweep.exit_status` gives it."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    retain_freed_memory()
    return exit_status(prog, lambda: _suite(args, prog, argv))


def _suite(args, prog: str, argv: list[str] | None) -> int:
    if args.json:
        problem = file_problem(Path(args.json))
        if problem:  # before hours of training, not after
            raise RunError(f"--json {problem}; choose another --json")
    schedule = schedule_fields(args, SET_BY_FLAG, "the suite")
    agents = list(dict.fromkeys(canonical_name(agent) for agent in args.agent))
    if "static" in agents:
        raise RunError("the suite trains the static nets itself; give learners with --agent")
    if "auto" in args.static_lr and len(args.static_lr) > 1:
        raise RunError("--static-lr takes learning rates or auto alone, not both")
    static_lr = "auto" if args.static_lr == ["auto"] else list(dict.fromkeys(args.static_lr))
    machine = dict(device=args.device, data_dir=args.data_dir, download=args.download,
                   validation_fraction=args.validation_fraction, **schedule)
    try:
        results = run_suite(agents, args.tasks, args.k_cpts, args.seeds, args.preset, args.policy, static_lr,
                            args.lr_candidates, args.lr_iterations, args.logdir,
                            backend=backend(args, [make_config(args.preset, device=args.device)]),
                            learner_fields=fields(args.learner_set, "--learner-set"), **machine)
    except DataNotFoundError as error:
        raise RunError(str(error)) from None
    results["command"] = [prog, *(sys.argv[1:] if argv is None else argv)]
    print(suite_table(results))
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(results, indent=2))
    return 0
