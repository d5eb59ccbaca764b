"""The paper's experimental section (Section 5), claim by claim, from one sweep.

    python experiments/reproduce_paper.py --figure hybrid --preset cpu-small --seeds 0 1 2
    python experiments/reproduce_paper.py --figure all --dry-run          # the runs and their budget
    python experiments/reproduce_paper.py --figure hybrid trees --figure-seeds hybrid=0,1,2,3,4

Each figure is a declarative list of :class:`Series` (static nets 1–8, or a learner at every
k_cpt, with its settings: dataset, width, arch, k_dec, TALR). Every series becomes
:func:`~routing_rl.app.sweep.sweep_configs` configs in its own folder of the logdir, named by
dataset, width and the settings that differ from the defaults, so figures that share runs
(the hybrid static nets, the CIFAR-10 actor) train them once. The sweep trains what is not
complete (:func:`~routing_rl.app.sweep.run_sweep`: local workers or Ray), then for every
figure this module draws the accuracy/MACs plot (one series per learner, seed means), the
node-link diagrams and the routing heatmaps (:func:`~routing_rl.app.figures.write_figures`),
and writes ``docs/reproduction.md``: per claim the paper's statement, the measured numbers
per seed, and a verdict computed from them (:func:`verdict`), with the compute budget.

**Verdicts.** A claim compares two quantities seed by seed (e.g. an actor point's accuracy
minus the static frontier's at no more MACs). Over the seeds the difference has a mean and a
standard error; the claim *holds* when the mean is more than two standard errors on the
claimed side, *does not hold* when it is more than two standard errors on the other side,
and is *not resolved at this scale* otherwise, or with fewer than two seeds, or when the
runs it needs are missing. A claim of several parts holds when every part holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import matplotlib.pyplot as plt

from routing_rl.app.figures import check_out_folder, write_figures
from routing_rl.app.frontier import frontier_margin, static_frontier
from routing_rl.app.plots import accuracy_macs_figure
from routing_rl.app.schedule_check import RISE_LIMIT, StaticRun, schedule_evidence, train_accuracy
from routing_rl.app.runs import METRICS_FILE, RunError, final_validation_accuracy, has_checkpoint, read_run
from routing_rl.app.sweep import (LR_CANDIDATES, STATIC_LRS, SweepError, add_backend_arguments, add_schedule_arguments, backend,
                                  exit_status, lr_trial_iterations, run_sweep, schedule_fields, select_static_lr,
                                  sweep_configs)
from routing_rl.core.memory import retain_freed_memory
from routing_rl.nets.multiscale import build
from routing_rl.training.config import BEFORE_NESTING, PRESET_VALUES, TrainConfig

K_CPTS = (0.0, 4e-9, 1.6e-8, 6.4e-8)
"""The k_cpt values of every learner series by default: every other one of the paper's eight
(``K_CPT_VALUES``), from free computation to the dearest."""
STATIC_COLUMNS = tuple(range(1, 9))
SET_BY_FLAG = {"agent": "--figure", "dataset": "--figure", "env": "--figure", "k_cpt": "--k-cpts", "seed": "--seeds",
               "preset": "--preset", "static_lr": "--static-lr", "logdir": "--logdir", "device": "--device",
               "data_dir": "--data-dir", "run_name": None}
"""Fields ``--set`` refuses, each with the flag that sets it (None: the runs are named by their figure)."""
HOLDS, FAILS, OPEN = "holds", "does not hold", "not resolved at this scale"
CPU_SECONDS_PER_MAC = 0.235 / (128 * 20_551_424)
"""Training time per MAC of full evaluation and example, one thread on the 2-core x86 CPU of
the README (a static-8 step of batch 128 took 0.22–0.25 s, an actor-chain step the same)."""
GPU_STEP_SECONDS = {"static": 0.0161, "chain": 0.0286}
"""One H100 step at batch 128 (README: launch-bound, so about the same at every width);
a tree's step is scaled by its column instances (47 against the chain's 8)."""
TREE_OVER_CHAIN_LAUNCHES = 47 / 8
PACKED_GPU_SHARE = 97.1 / 219.9
"""Wall time of a grid at 8 runs per GPU over its :data:`GPU_STEP_SECONDS` estimate one run at
a time: the hybrid figure's 15 runs (one seed, 600 iterations) took 97.1 s on one H200 against
219.9 s estimated (``gpu/throughput.sh``, README "Sweeps side by side")."""


PAPER_LEARNERS = {"head_weight": 0.0}
"""Fields every learner of the paper's figures takes whatever this package's defaults: heads
learn by their routed share (a critic on the full tree now adds every head's cross-entropy,
``head_weight`` 1, at lr 0.02: docs/suite.md)."""


@dataclass(frozen=True)
class Series:
    """One series of a figure: static nets, or a learner at every k_cpt.

    settings: config fields (dataset, width, arch, k_dec, talr, ...); k_cpt_scale: the
    learner's k_cpt is the nominal one times this (capacity: ÷ width²); dynamic: one
    dynamic-k_cpt net evaluated at every k_cpt instead of one net per k_cpt.
    """

    label: str
    agent: str
    settings: dict = field(default_factory=dict)
    k_cpt_scale: float = 1.0
    dynamic: bool = False
    tag: str = ""
    """Appended to the folder: static nets trained at another learning rate (``-lr0.02``)."""

    @property
    def base(self) -> str:
        """Dataset and width: the static nets of this base are the series' baseline."""
        return f"{self.settings.get('dataset', 'hybrid')}-w{self.settings.get('width', 1)}"

    @property
    def folder(self) -> str:
        """The logdir folder: the base and the settings that are not the defaults (the arch
        is in the run name already)."""
        name = self.base
        for key, value in sorted(self.settings.items()):  # a learner's option against its default before the nesting
            if key not in ("dataset", "width", "arch") and value != BEFORE_NESTING.get(key, getattr(TrainConfig, key, None)):
                name += f"-{key.replace('_', '')}{value if not isinstance(value, bool) else ('on' if value else 'off')}"
        return name + self.tag


@dataclass(frozen=True)
class Claim:
    """A claim as measured here (``statement``, with what "here" means), the paper's own words
    and what its figures show (``paper``), and the function that measures it:
    ``measure(results)`` returns an :class:`Outcome`."""

    statement: str
    paper: str
    measure: Callable


class Outcome(NamedTuple):
    """A claim's verdict and why; ``numbers``: name -> per-seed values; ``parts``: (name,
    verdict, reason) of each part of a claim of several (one per learner where the paper
    compares learners), empty for a claim of one."""

    verdict: str
    reason: str
    numbers: dict
    parts: tuple = ()


def of_parts(parts: Sequence[tuple[str, str, str]], numbers: dict) -> Outcome:
    """The outcome of a claim of several parts (:func:`combine`)."""
    return Outcome(*combine(parts), numbers, tuple(parts))


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    series: tuple[Series, ...]
    claims: tuple[Claim, ...]


# ---------------------------------------------------------------- verdicts


def verdict(differences: Sequence[float], claimed: str = "above", tolerance: float = 0.0) -> tuple[str, str]:
    """The verdict on per-seed ``differences`` (accuracy points): ``claimed`` ``above`` (the
    difference is > tolerance), ``below`` (< −tolerance), ``not below`` (≥ −tolerance) or
    ``within`` (|difference| ≤ tolerance); see the module docstring. Returns (verdict, reason)."""
    values = [d for d in differences if d is not None and math.isfinite(d)]
    if not values:
        return OPEN, "no runs to measure it on"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return OPEN, f"{mean:+.2f} from one seed; a verdict needs two or more"
    error = statistics.stdev(values) / math.sqrt(len(values))
    low, high = mean - 2 * error, mean + 2 * error
    said = f"{mean:+.2f} ± {error:.2f} (standard error, {len(values)} seeds)"
    if claimed == "above":
        yes, no = low > tolerance, high < tolerance
    elif claimed == "below":
        yes, no = high < -tolerance, low > -tolerance
    elif claimed == "not below":
        yes, no = low >= -tolerance, high < -tolerance
    elif claimed == "within":
        yes, no = -tolerance <= low and high <= tolerance, high < -tolerance or low > tolerance
    else:
        raise ValueError(f"unknown claim direction {claimed!r}")
    if yes:
        return HOLDS, said
    if no:
        return FAILS, said
    return OPEN, said + ": within twice its standard error of the claim's boundary"


def monotone(rises: Sequence[float]) -> tuple[str, str]:
    """The verdict on per-seed counts of the steps where a quantity that should only fall rose:
    holds when no seed's ever rose, does not when one did (a count, not a mean: no error bar)."""
    values = [r for r in rises if r is not None]
    if len(values) < 2:
        return OPEN, "no runs to measure it on" if not values else "one seed; a verdict needs two or more"
    said = f"steps where it rose, per seed: {', '.join(str(int(r)) for r in values)}"
    return (HOLDS if not any(values) else FAILS), said


def combine(parts: Sequence[tuple[str, str, str]]) -> tuple[str, str]:
    """One verdict from (name, verdict, reason) parts: every part holds → holds; any does not → does not."""
    verdicts = [v for _, v, _ in parts]
    overall = HOLDS if verdicts and all(v == HOLDS for v in verdicts) else FAILS if FAILS in verdicts else OPEN
    return overall, "; ".join(f"{name}: {v} ({reason})" for name, v, reason in parts)


# ---------------------------------------------------------------- results


@dataclass
class Point:
    """One test evaluation of a finished run: series, seed, nominal k_cpt (None for static
    nets), accuracy (0..1), mean MACs; ``run``: its metrics, ``evaluation``: this point's,
    ``run_dir``: its folder."""

    series: Series
    seed: int
    k_cpt: float | None
    accuracy: float
    mean_macs: float
    run: dict
    evaluation: dict
    run_dir: Path | None = None


def _frontier_key(base: str) -> tuple[str, str]:
    """The static nets of a base (``hybrid-w1``) as :class:`Results` tracks their unfinished
    seeds: one key for all of them, since a missing net changes the frontier of every learner."""
    return ("static nets", base)


def _unfinished_key(series: Series) -> tuple[str, str]:
    return _frontier_key(series.base) if series.agent == "static" else (series.label, series.folder)


class Results:
    """The finished runs of a figure, as points.

    missing: the unfinished runs' names; unfinished: (``_unfinished_key``, seed) of each series
    with a planned run not finished. A claim reads a seed's points only once all of that seed's
    runs of the series and all of its static nets have finished (:meth:`of`), so that a report
    read mid-sweep is not biased by whichever runs happened to finish first.
    """

    def __init__(self, points: list[Point], missing: list[str], unfinished: frozenset = frozenset()):
        self.points, self.missing, self.unfinished = points, missing, unfinished

    def of(self, series: Series, seed: int | None = None) -> list[Point]:
        """The series' points; of one seed, none until that seed's runs of the series and its
        static nets have all finished."""
        if seed is not None and {(_unfinished_key(series), seed), (_frontier_key(series.base), seed)} & self.unfinished:
            return []
        return [p for p in self.points if p.series == series and (seed is None or p.seed == seed)]

    def seeds(self) -> list[int]:
        return sorted({p.seed for p in self.points})

    def static_net(self, point: Point, arch: str) -> Point | None:
        """The static net ``arch`` (``static-3``) of the point's dataset, width and seed."""
        found = [p for p in self.points if p.series.agent == "static" and p.series.base == point.series.base
                 and p.seed == point.seed and p.run["arch"] == arch]
        return found[0] if found else None

    def frontier_at(self, point: Point) -> float | None:
        """The static frontier of the point's dataset, width and seed at its MACs: the best static
        accuracy (0..1) at no more MACs (None left of the cheapest static net)."""
        static = [p.accuracy for p in self.points if p.series.agent == "static" and p.series.base == point.series.base
                  and p.seed == point.seed and p.mean_macs <= point.mean_macs]
        return max(static) if static else None

    def frontier_margin(self, point: Point) -> float | None:
        """Accuracy points above the static frontier at the point's MACs (:meth:`frontier_at`)."""
        frontier = self.frontier_at(point)
        return None if frontier is None else 100 * (point.accuracy - frontier)

    def mean_margin(self, series: Series, seed: int, k_cpts: Sequence[float] | None = None) -> float | None:
        """The series' mean margin over the static frontier at ``k_cpts`` (default: all)."""
        margins = [self.frontier_margin(p) for p in self.of(series, seed) if k_cpts is None or p.k_cpt in k_cpts]
        margins = [m for m in margins if m is not None]
        return statistics.fmean(margins) if margins else None

    def accuracy_at(self, series: Series, seed: int, k_cpt: float) -> float | None:
        found = [p.accuracy for p in self.of(series, seed) if p.k_cpt == k_cpt]
        return 100 * found[0] if found else None


def read_results(planned: Sequence[tuple[Series, TrainConfig]], k_cpts: Sequence[float] = K_CPTS) -> Results:
    """The points of the finished runs among ``planned``; the others are named as missing."""
    points, missing, unfinished = [], [], set()
    for series, config in planned:
        path = Path(config.logdir) / config.run_name / METRICS_FILE
        if not path.is_file():
            missing.append(f"{series.folder}/{config.run_name}")
            unfinished.add((_unfinished_key(series), config.seed))
            continue
        run = json.loads(path.read_text())
        for evaluation in run["test"]:
            if series.agent == "static":
                k_cpt = None
            elif series.dynamic:
                k_cpt = evaluation.get("k_cpt")
            else:
                k_cpt = nominal_k_cpt(series, config.k_cpt, k_cpts)
            points.append(Point(series, config.seed, k_cpt, evaluation["accuracy"], evaluation["mean_macs"], run, evaluation,
                                path.parent))
    return Results(best_static_lr(points), missing, frozenset(unfinished))


def best_static_lr(points: list[Point]) -> list[Point]:
    """Of a static net trained at several learning rates (``--static-lr A B``), the one with
    the best final validation accuracy per seed (a tie: the first listed), as a point of the
    untagged series; every other point as it is."""
    best: dict[tuple, Point] = {}
    others = []
    for point in points:
        if point.series.agent != "static":
            others.append(point)
            continue
        untagged = dataclasses.replace(point.series, tag="")
        key = (untagged.folder, point.run["arch"], point.seed)
        if key not in best or final_validation_accuracy(point.run) > final_validation_accuracy(best[key].run):
            best[key] = dataclasses.replace(point, series=untagged)
    return others + list(best.values())


def nominal_k_cpt(series: Series, k_cpt: float, k_cpts: Sequence[float]) -> float:
    """The figure's k_cpt (one of ``k_cpts``) of a run trained at ``k_cpt`` (capacity runs
    train at k_cpt ÷ width²)."""
    return min(k_cpts, key=lambda k: abs(k * series.k_cpt_scale - k_cpt))


def per_seed(results: Results, value: Callable[[int], float | None]) -> list[float]:
    return [v for v in (value(seed) for seed in results.seeds()) if v is not None]


def _difference(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def paired(results: Results, measure: Callable, a: Series, b: Series) -> list[float]:
    """Per seed, ``measure(a, seed) − measure(b, seed)``, over the seeds that have both."""
    return per_seed(results, lambda seed: _difference(measure(a, seed), measure(b, seed)))


# ---------------------------------------------------------------- the figures


def figures(k_cpts: Sequence[float] = K_CPTS, widths: Sequence[int] = (1, 2, 3)) -> dict[str, Figure]:
    """Every figure of Section 5, by name."""
    low, high = k_cpts[: max(1, len(k_cpts) // 2)], k_cpts[len(k_cpts) // 2:]
    central = k_cpts[1:-1] or k_cpts

    def static(**settings) -> Series:
        return Series("static nets", "static", settings)

    hybrid_static = static()
    actor, pragmatic, optimistic = (Series("actor", "actor"), Series("pragmatic critic", "pragmatic-critic"),
                                    Series("optimistic critic", "optimistic-critic"))
    dynamic = Series("actor, dynamic k_cpt", "actor", dynamic=True)
    # the paper's optimistic critic starves its shallow heads (docs/results/optimistic-critic.md);
    # this one trains every head on every image, as the package's critics do by default
    optimistic_heads = Series("optimistic critic, every head on every image", "optimistic-critic", {"head_weight": 1.0})

    def margins_above(results, learners):
        parts = [(s.label, *verdict(per_seed(results, lambda seed, s=s: results.mean_margin(s, seed)))) for s in learners]
        return of_parts(parts, {s.label: per_seed(results, lambda seed, s=s: results.mean_margin(s, seed)) for s in learners})

    def deep_static_overfit(results):
        def best(seed, columns):
            nets = [p for p in results.of(hybrid_static, seed) if int(p.run["arch"].split("-")[1]) in columns]
            return max(nets, key=lambda p: p.accuracy, default=None)

        def gaps(seed):
            shallow, deep = best(seed, range(1, 7)), best(seed, (7, 8))
            if shallow is None or deep is None:
                return None, None
            fits = [train_accuracy(p.run, p.run_dir) for p in (deep, shallow)]
            return 100 * (shallow.accuracy - deep.accuracy), None if None in fits else 100 * (fits[0] - fits[1])
        measured = {seed: gaps(seed) for seed in results.seeds()}  # reads each run's events once
        test = per_seed(results, lambda seed: measured[seed][0])
        train = per_seed(results, lambda seed: measured[seed][1])
        parts = [("less accurate on test than the best of static-1..6", *verdict(test)),
                 ("while fitting the training batches at least as well", *verdict(train, "not below"))]
        return of_parts(parts, {"test accuracy, best of static-1..6 − best of static-7, -8": test,
                               "training-batch accuracy (last tenth of training), the deep net − the shallow one": train})

    def learner_order(results):
        gaps = {"actor − pragmatic critic": paired(results, results.mean_margin, actor, pragmatic),
                "pragmatic − optimistic critic": paired(results, results.mean_margin, pragmatic, optimistic)}
        return of_parts([(name, *verdict(d)) for name, d in gaps.items()], gaps)

    def dynamic_matches_fixed(results):
        def gap(seed):
            d = [_difference(results.accuracy_at(dynamic, seed, k), results.accuracy_at(actor, seed, k)) for k in central]
            d = [x for x in d if x is not None]
            return statistics.fmean(d) if d else None

        def rises(seed):
            points = sorted(results.of(dynamic, seed), key=lambda p: p.k_cpt)
            return sum(b.mean_macs > a.mean_macs for a, b in zip(points, points[1:])) if len(points) > 1 else None

        def curve_gap(seed):
            # the paper compares curves: the dynamic net may buy the same k_cpt's accuracy with other MACs
            fixed = static_frontier((p.mean_macs, p.accuracy) for p in results.of(actor, seed))
            d = [frontier_margin(fixed, p.accuracy, p.mean_macs) for p in results.of(dynamic, seed) if p.k_cpt in central]
            d = [x for x in d if x is not None]
            return statistics.fmean(d) if d else None
        d, up = per_seed(results, gap), per_seed(results, rises)
        grid = ', '.join(f'{k:g}' for k in central)
        parts = [("MACs fall at every step of the k_cpt grid", *monotone(up)),
                 (f"within 1 point of the fixed actors at k_cpt {grid}", *verdict(d, "within", 1.0))]
        return of_parts(parts, {"steps of the k_cpt grid where the dynamic actor's mean MACs rise": up,
                                f"dynamic − fixed actor accuracy at k_cpt {grid}": d,
                                f"dynamic actor − the fixed actors' frontier at its MACs (not a verdict; k_cpt {grid})":
                                    per_seed(results, curve_gap)})

    def shallow_early(results):
        def growth(seed):
            changes = []
            for p in results.of(actor, seed):
                history = p.run["history"]
                if len(history) >= 2:
                    first, last = history[0]["evaluations"][0], history[-1]["evaluations"][0]
                    changes.append(100 * (last["mean_macs"] - first["mean_macs"]) / max(last["mean_macs"], 1))
            return statistics.fmean(changes) if changes else None
        d = per_seed(results, growth)
        return Outcome(*verdict(d), {"validation MACs, last minus first evaluation (% of last)": d})

    no_kdec = Series("actor, k_dec 0", "actor", {"k_dec": 0.0})

    def kdec_needed(results):
        d = paired(results, results.mean_margin, actor, no_kdec)
        return Outcome(*verdict(d), {"actor (k_dec 0.01) − actor (k_dec 0), margin over the static frontier": d})

    regularised = Series("actor, d̂ regularized", "actor", {"c_mod_routing": True})

    def dhat_discourages_depth(results):
        def macs(series, seed):
            points = results.of(series, seed)
            return statistics.fmean(p.mean_macs for p in points) if points else None

        def peak(series, seed):
            return max((100 * p.accuracy for p in results.of(series, seed)), default=None)
        def fewer(seed):
            plain, regularized = macs(actor, seed), macs(regularised, seed)
            return None if not plain or regularized is None else 100 * (1 - regularized / plain)
        shallower = per_seed(results, fewer)
        lower = paired(results, peak, actor, regularised)
        parts = [("fewer MACs", *verdict(shallower)), ("lower peak accuracy", *verdict(lower))]
        return of_parts(parts, {"mean MACs over the k_cpt values, % below the actor's (d̂ constant)": shallower,
                               "peak test accuracy, actor − actor with d̂ regularized": lower})

    actor_off, pragmatic_off = (Series("actor, no TALR", "actor", {"talr": False}),
                                Series("pragmatic critic, no TALR", "pragmatic-critic", {"talr": False}))

    def talr_helps(results):
        parts, numbers = [], {}
        for on, off in ((actor, actor_off), (pragmatic, pragmatic_off)):
            def gap(seed, on=on, off=off):
                d = [_difference(results.accuracy_at(on, seed, k), results.accuracy_at(off, seed, k)) for k in low]
                d = [x for x in d if x is not None]
                return statistics.fmean(d) if d else None
            d = per_seed(results, gap)
            numbers[f"{on.label}: TALR − no TALR accuracy at k_cpt {', '.join(f'{k:g}' for k in low)}"] = d
            parts.append((on.label, *verdict(d)))
        return of_parts(parts, numbers)

    tree = Series("actor (tree)", "actor", {"arch": "tree"})

    def tree_tight(results):
        d = paired(results, lambda s, seed: results.mean_margin(s, seed, high), tree, actor)
        return Outcome(*verdict(d), {f"tree − chain margin over the static frontier at k_cpt {', '.join(f'{k:g}' for k in high)}": d})

    def tree_overfits(results):
        d = paired(results, lambda s, seed: results.accuracy_at(s, seed, k_cpts[0]), tree, actor)
        return Outcome(*verdict(d, "below"), {f"tree − chain test accuracy at k_cpt {k_cpts[0]:g}": d})

    def tree_specializes(results):
        d = per_seed(results, lambda seed: _difference(purity(results.of(tree, seed)), purity(results.of(actor, seed))))
        return Outcome(*verdict(d), {"tree − chain source purity of the leaves (% of examples)": d})

    cifar = {name: (static(dataset=name), Series(f"actor, {name}", "actor", {"dataset": name}))
             for name in ("cifar2", "cifar5", "cifar10")}

    def cifar2_peak(results):
        net_static, net_actor = cifar["cifar2"]

        def peak(seed):
            s, a = results.of(net_static, seed), results.of(net_actor, seed)
            return 100 * (max(p.accuracy for p in a) - max(p.accuracy for p in s)) if s and a else None

        def cost_share(seed):
            s, a = results.of(net_static, seed), results.of(net_actor, seed)
            if not s or not a:
                return None
            best = max(s, key=lambda p: (p.accuracy, -p.mean_macs))
            reaching = [p.mean_macs for p in a if p.accuracy >= best.accuracy]
            return 100 * min(reaching) / best.mean_macs if reaching else None
        peaks, shares = per_seed(results, peak), per_seed(results, cost_share)
        third = verdict([33.3 - s for s in shares]) if shares or not peaks else \
            (FAILS, "no actor point reaches the best static net's accuracy")
        parts = [("peak above the static nets'", *verdict(peaks)), ("at a third of the best static net's MACs", *third)]
        return of_parts(parts, {"actor − static peak accuracy": peaks,
                               "cheapest actor point at the best static accuracy, % of its MACs": shares})

    def difficulty_order(results):
        adv = {name: (lambda seed, s=s, a=a: results.mean_margin(a, seed)) for name, (s, a) in cifar.items()}
        d25 = per_seed(results, lambda seed: _difference(adv["cifar2"](seed), adv["cifar5"](seed)))
        d510 = per_seed(results, lambda seed: _difference(adv["cifar5"](seed), adv["cifar10"](seed)))
        d10 = per_seed(results, adv["cifar10"])
        parts = [("CIFAR-2 > CIFAR-5", *verdict(d25)), ("CIFAR-5 > CIFAR-10", *verdict(d510)),
                 ("CIFAR-10 still above", *verdict(d10, "not below"))]
        return of_parts(parts, {"actor margin over the static frontier, CIFAR-2 − CIFAR-5": d25,
                               "CIFAR-5 − CIFAR-10": d510, "CIFAR-10": d10})

    wide = {w: (static(dataset="cifar10", width=w),
                Series(f"actor, CIFAR-10, width ×{w}", "actor", {"dataset": "cifar10", "width": w}, 1 / w**2)) for w in widths}

    def capacity(results):
        parts, numbers = [], {}
        base = wide[widths[0]][1]
        for w in widths[1:]:
            d = paired(results, results.mean_margin, wide[w][1], base)
            numbers[f"actor margin over the static frontier, width ×{w} − ×{widths[0]}"] = d
            parts.append((f"×{w}", *verdict(d, "not below")))
        return of_parts(parts, numbers)

    return {
        "hybrid": Figure("hybrid", "Hybrid MNIST/CIFAR-10: learners against static nets (Fig. acc-eff-00)",
                         (hybrid_static, actor, pragmatic, optimistic, dynamic, optimistic_heads), (
            Claim("For a given computational budget, dynamically routed networks (actor, pragmatic critic, optimistic "
                  "critic) achieve higher accuracy than architecture-matched statically routed baselines (here also: "
                  "the optimistic critic with every head trained on every image, this package's critic).",
                  "“For a given computational budget, dynamically-routed networks achieve higher accuracy rates than "
                  "architecture-matched statically-routed baselines” (Sec. 5.1), every learner above the static "
                  "nets in Fig. acc-eff-00; “trained under mild computational constraints can operate 2–3 times "
                  "more efficiently than comparable statically-routed networks” (Sec. 6).",
                  lambda r: margins_above(r, (actor, pragmatic, optimistic, optimistic_heads))),
            Claim("7- and 8-column static networks overfit (here: the best of them is less accurate on test than the "
                  "best shallower static net while fitting its training batches at least as well; less accurate on "
                  "both is under-fitting).",
                  "“this tendency to initially find simpler solutions seems to prevent some of the overfitting that "
                  "occurs with 7- and 8-layer statically-routed networks” (Sec. 5.1).", deep_static_overfit),
            Claim("Optimistic critics perform worst and actors best among the dynamic networks.",
                  "“Compared to other dynamically-routed networks, optimistic critic networks perform poorly … Actor "
                  "networks perform better than critic networks” (Sec. 5.1).", learner_order),
            Claim("A single dynamic-k_cpt actor performs comparably (here: its MACs fall as its k_cpt input rises, and "
                  "it is within 1 accuracy point of the actors trained at fixed k_cpt) over the central part of the "
                  "curve.",
                  "“This network performs comparably to a collection of 8 actor nets trained with various static "
                  "values of k_cpt, over a significant, central region of the accuracy/efficiency curve” (Sec. 5.5).",
                  dynamic_matches_fixed))),
        "regularization": Figure("regularization", "Regularization: d̂ regularized, and k_dec 0.01 against 0 (hybrid)",
                                 (hybrid_static, actor, no_kdec, regularised), (
            Claim("Regularizing d̂ discourages routing along deep paths, reducing peak accuracy (here: c_mod's gradient "
                  "also reaches the routers, `--c-mod-routing`, against the default d̂ constant).",
                  "“regularizing d̂ … discourages networks from routing data along deep paths, reducing peak "
                  "accuracy” (Sec. 5.2).", dhat_discourages_depth),
            Claim("A nonzero k_dec is needed to train effective actor networks.",
                  "“some mechanism for encouraging exploration (in our case, a nonzero k_dec) appears to be necessary "
                  "to train effective actor networks” (Sec. 5.2).", kdec_needed))),
        "talr": Figure("talr", "Optimization: TALR on and off (hybrid)",
                       (hybrid_static, actor, pragmatic, actor_off, pragmatic_off), (
            Claim("TALR improves actor and critic networks in compute-abundant, high-accuracy contexts "
                  f"(here: the lowest k_cpt values, {', '.join(f'{k:g}' for k in low)}).",
                  "“Throughput-adjusting the learning rates (TALR) … improves the hybrid dataset performance of both "
                  "actor and critic networks in computational-resource-abundant, high-accuracy contexts” (Sec. 5.3).",
                  talr_helps),)),
        "trees": Figure("trees", "Architectures: tree (2- and 3-way junctions) against chain (hybrid)",
                        (hybrid_static, actor, tree), (
            Claim(f"Under tight budgets (here: k_cpt {', '.join(f'{k:g}' for k in high)}) trees with 2- and 3-way "
                  "junctions beat chains of 2-way junctions.",
                  "“On the hybrid dataset, under tight computational constraints, we find that trees with higher "
                  "degrees of branching achieve higher accuracy rates” (Sec. 5.4).", tree_tight),
            Claim(f"Unconstrained (k_cpt {k_cpts[0]:g}) trees overfit: lower test accuracy than the chain.",
                  "“Unconstrained, however, they are prone to overfitting” (Sec. 5.4).", tree_overfits),
            Claim("Branches specialize: a tree's leaves see purer sources (MNIST or CIFAR) than a chain's.",
                  "“In networks with both 2- and 3-way junctions, branches specialize to an even greater extent” "
                  "(Sec. 5.4, Figs. nld-00 and nld-01).", tree_specializes))),
        "routing": Figure("routing", "Routing over training (Fig. routing-hists): actor chains on hybrid", (actor,), (
            Claim("Dynamically routed networks avoid deep paths at the beginning of training (validation MACs "
                  "grow from the first evaluation to the last).",
                  "“dynamically-routed networks tend to avoid routing data along deep paths at the beginning of "
                  "training” (Sec. 5.1, Fig. routing-hists).", shallow_early),)),
        "difficulty": Figure("difficulty", "Decision difficulty: CIFAR-2, CIFAR-5, CIFAR-10 (Fig. acc-eff-01)",
                             tuple(s for pair in cifar.values() for s in pair), (
            Claim("On CIFAR-2 dynamic routing reaches a higher peak accuracy than static nets at a third of their cost.",
                  "“dynamically-routed networks achieve a higher peak accuracy rate on CIFAR-2 than statically-routed "
                  "networks, at a third of the computational cost” (Sec. 5.6).", cifar2_peak),
            Claim("The advantage shrinks from CIFAR-2 to CIFAR-5 to CIFAR-10, where it is slight.",
                  "“dynamic routing is more beneficial when the task involves many low-difficulty decisions … dynamic "
                  "routing offers only a slight advantage on CIFAR-10” (Sec. 5.6).", difficulty_order))),
        "capacity": Figure("capacity", "Model capacity: CIFAR-10 at width ×1, ×2, ×3 with k_cpt ÷ width² (Fig. acc-eff-02)",
                           tuple(s for pair in wide.values() for s in pair), (
            Claim("Widening every layer (k_cpt ÷ width²) increases or keeps the actor's advantage over static nets.",
                  "“Increasing the model capacity either increases or does not affect the relative advantage of "
                  "dynamically-routed networks” (Sec. 5.7).", capacity),)),
    }


def purity(points: Sequence[Point]) -> float | None:
    """The share (%) of test examples whose leaf's majority source is their own, averaged
    over the points (1 source per leaf: 100)."""
    shares = []
    for point in points:
        evaluation = point.evaluation
        total = sum(leaf["count"] for leaf in evaluation["leaves"].values())
        majority = sum(max(leaf["by_source"].values(), default=0) for leaf in evaluation["leaves"].values())
        if total:
            shares.append(100 * majority / total)
    return statistics.fmean(shares) if shares else None


# ---------------------------------------------------------------- the sweep


def plan_runs(chosen: Sequence[Figure], preset: str, seeds: Sequence[int], k_cpts: Sequence[float],
              static_columns: Sequence[int], static_lrs: dict[str, Sequence[float | None]], logdir: Path,
              machine: dict, lr_choices: dict[tuple[str, str], float] | None = None,
              figure_seeds: dict[str, Sequence[int]] | None = None) -> dict[str, list[tuple[Series, TrainConfig]]]:
    """Every figure's (series, config) pairs; a run shared by figures has one config.

    A figure trains ``figure_seeds[name]`` where given (a claim that needs more seeds than the
    others), else ``seeds``. A static net of the first of ``seeds`` is trained at each of
    ``static_lrs[folder]``; of a later seed, only at ``lr_choices[(folder, arch)]``
    (:func:`static_lr_choices`) where the first seed has chosen, else at each too."""
    planned = {}
    lr_choices = lr_choices or {}
    for figure in chosen:
        pairs = []
        its_seeds = (figure_seeds or {}).get(figure.name, seeds)
        for series in figure.series:
            if series.agent == "static":  # one folder per learning rate, the first untagged
                for i, lr in enumerate(static_lrs.get(series.folder) or [None]):
                    tagged = dataclasses.replace(series, tag=f"-lr{lr:g}" if i else "")
                    fields = {**machine, **series.settings, "logdir": str(logdir / tagged.folder)}
                    for seed in its_seeds:
                        columns = [n for n in static_columns
                                   if seed == seeds[0] or lr_choices.get((series.folder, f"static-{n}"), lr) == lr]
                        pairs += [(tagged, config) for config in
                                  sweep_configs([], [], [seed], columns, preset=preset, static_lr=lr, **fields)]
            else:
                fields = {**PAPER_LEARNERS, **machine, **series.settings, "logdir": str(logdir / series.folder)}
                scaled = ["dynamic"] if series.dynamic else [k * series.k_cpt_scale for k in k_cpts]
                pairs += [(series, config) for config in sweep_configs([series.agent], scaled, its_seeds, preset=preset, **fields)]
        planned[figure.name] = pairs
    return planned


def static_lr_choices(planned: dict[str, list[tuple[Series, TrainConfig]]], static_lrs: dict[str, Sequence[float | None]]
                      ) -> dict[tuple[str, str], float]:
    """``(folder, arch)`` → the learning rate whose run validated best (the first listed on a
    tie), for each static net of ``planned`` complete at every one of ``static_lrs[folder]``.

    Chosen on the first seed and kept for the others, as any hyperparameter is: the later
    seeds then train each net once, not once per rate."""
    validated: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for pairs in planned.values():
        for series, config in pairs:
            path = Path(config.logdir) / config.run_name / METRICS_FILE
            if series.agent == "static" and path.is_file():
                accuracy = final_validation_accuracy(json.loads(path.read_text()))
                if accuracy is not None:
                    validated.setdefault((dataclasses.replace(series, tag="").folder, config.arch), []).append(
                        (accuracy, config.lr))
    choices = {}
    for (folder, arch), runs in validated.items():
        rates = list(dict.fromkeys(static_lrs.get(folder) or []))
        by_rate = dict((lr, accuracy) for accuracy, lr in runs)
        if len(rates) > 1 and set(rates) <= set(by_rate):
            choices[(folder, arch)] = max(rates, key=lambda lr: (by_rate[lr], -rates.index(lr)))
    return choices


def unique_configs(planned: dict[str, list[tuple[Series, TrainConfig]]]) -> list[TrainConfig]:
    configs = {}
    for pairs in planned.values():
        for _, config in pairs:
            configs.setdefault(Path(config.logdir) / config.run_name, config)
    return list(configs.values())


# ---------------------------------------------------------------- the budget


def estimated_seconds(config: TrainConfig, measured_rate: float | None = None) -> tuple[float, float]:
    """(CPU seconds on one thread, GPU seconds) to train ``config``. The CPU estimate takes
    ``measured_rate`` (training seconds per MAC of full evaluation and example, as finished runs
    of the same learner and net measured; :func:`measured_rates`) where there is one, else the
    README's step timing (:data:`CPU_SECONDS_PER_MAC`); the GPU one :data:`GPU_STEP_SECONDS`."""
    rate = CPU_SECONDS_PER_MAC if measured_rate is None else measured_rate
    cpu = config.iterations * config.batch_size * full_macs(config.arch, config.width) * rate
    step = GPU_STEP_SECONDS["static" if config.arch.startswith("static-") else "chain"]
    if config.arch == "tree":
        step *= TREE_OVER_CHAIN_LAUNCHES
    return cpu, config.iterations * step


def train_seconds(config: TrainConfig) -> float | None:
    """The training time a finished run of ``config`` recorded; None while it has not finished."""
    path = Path(config.logdir) / config.run_name / METRICS_FILE
    return json.loads(path.read_text())["train_seconds"] if path.is_file() else None


def measured_rates(finished: Sequence[tuple[TrainConfig, float]]) -> dict[tuple[str, str, int], float]:
    """Median training seconds per MAC of full evaluation and example, by (agent, arch, width),
    over ``finished`` runs and their training seconds. A run's training time holds what a step's
    MACs do not: its evaluations, the per-step overhead that bounds a one-column net, and the load
    of the machine the sweep ran on. On the hybrid figure's runs at ``cpu-small`` the rates ranged
    from 0.7 (static-8) to 2.3 (the actor's tree) and 2.4 (static-1) times the README's static-8
    step."""
    rates: dict[tuple[str, str, int], list[float]] = {}
    for config, seconds in finished:
        work = config.iterations * config.batch_size * full_macs(config.arch, config.width)
        rates.setdefault((config.agent, config.arch, config.width), []).append(seconds / work)
    return {key: statistics.median(values) for key, values in rates.items()}


@functools.cache
def full_macs(arch: str, width: int) -> int:
    """MACs per example of evaluating every node of the net (what a full-tree step computes)."""
    return build(arch, width).full_macs


def budget_row(configs: Sequence[TrainConfig], workers: int) -> dict:
    """#runs, measured training hours of the finished runs, CPU hours of all of them (measured
    where finished, estimated for the rest, of which ``left_worker_hours`` is what resuming costs
    on ``workers``) and estimated GPU hours."""
    seconds = [train_seconds(config) for config in configs]
    finished = [(config, time) for config, time in zip(configs, seconds) if time is not None]
    rates = measured_rates(finished)
    left, gpu = 0.0, 0.0
    for config, time in zip(configs, seconds):
        estimate = estimated_seconds(config, rates.get((config.agent, config.arch, config.width)))
        left += estimate[0] if time is None else 0.0
        gpu += estimate[1]
    measured = sum(time for _, time in finished)
    cpu, workers = measured + left, max(workers, 1)
    return {"runs": len(configs), "finished": len(finished), "measured_hours": measured / 3600, "cpu_hours": cpu / 3600,
            "worker_hours": cpu / 3600 / workers, "left_worker_hours": left / 3600 / workers, "gpu_hours": gpu / 3600,
            "workers": workers}


def budget_table(rows: dict[str, dict]) -> list[str]:
    workers = next(iter(rows.values()))["workers"] if rows else 1
    lines = ["| figure | runs | finished | training hours measured (sum of train_seconds) | CPU-hours, one thread "
             f"(measured where finished) | wall hours, {workers} workers | of which still to train | hours on one H100, "
             "one run at a time (estimate) | hours on one H200, 8 runs per GPU (estimate from its measured hybrid grid) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['runs']} | {row['finished']} | {row['measured_hours']:.2f} | {row['cpu_hours']:.1f} "
                     f"| {row['worker_hours']:.1f} | {row['left_worker_hours']:.1f} | {row['gpu_hours']:.1f} "
                     f"| {row['gpu_hours'] * PACKED_GPU_SHARE:.2f} |")
    return lines


def trained_on_gpus(configs: Sequence[TrainConfig]) -> list[str]:
    """A sentence naming the finished runs whose saved config asked for a CUDA device (their
    results are not bit-reproducible: cuDNN picks non-deterministic kernels)."""
    finished = [Path(c.logdir) / c.run_name for c in configs if (Path(c.logdir) / c.run_name / METRICS_FILE).is_file()]
    on_gpu = [f"{run.parent.name}/{run.name}" for run in finished if read_run(run).device.startswith("cuda")]
    if not on_gpu:
        return []
    return [f"{len(on_gpu)} of the {len(configs)} runs trained on a GPU, the others on the CPU: "
            + ", ".join(f"`{name}`" for name in on_gpu) + ".", ""]


def paper_schedule(configs: Sequence[TrainConfig], total: dict) -> list[str]:
    """What the same runs would cost at the paper's iterations (estimates, linear in iterations)."""
    paper = PRESET_VALUES["paper"]["iterations"]
    scale = statistics.fmean(paper / config.iterations for config in configs)
    return ["## At the paper's schedule", "",
            f"The paper trains every net for {paper:,} iterations, {scale:.0f}× these runs' "
            f"{statistics.median(c.iterations for c in configs):,.0f}: the same {total['runs']} runs would take about "
            f"{total['cpu_hours'] * scale:,.0f} CPU-hours on one thread of this machine, {total['gpu_hours'] * scale:,.0f} "
            f"hours on one H100 one run at a time, or {total['gpu_hours'] * scale * PACKED_GPU_SHARE:,.0f} on one H200 at "
            "8 runs per GPU (estimates, linear in iterations)."]


def schedule_section(chosen: Sequence[Figure], planned: dict[str, list[tuple[Series, TrainConfig]]],
                     k_cpts: Sequence[float]) -> list[str]:
    """Whether this schedule trains the static nets (:mod:`~routing_rl.app.schedule_check`),
    per dataset and width the figures use."""
    lines = ["## The schedule", "", "Is every static net trained at this schedule? "
             "(`routing_rl/app/schedule_check.py`: validation accuracy gains under "
             f"{RISE_LIMIT:g} point over the last quarter of training, and the deep nets fit their training batches at "
             "least as well as static-3.) Means over seeds; validation accuracy at each evaluation, by iteration.", ""]
    for base in dict.fromkeys(s.base for f in chosen for s in f.series if s.agent == "static"):
        pairs = [(s, c) for f in chosen for s, c in planned[f.name] if s.agent == "static" and s.base == base]
        results = read_results(list({(c.logdir, c.run_name): (s, c) for s, c in pairs}.values()), k_cpts)  # a run shared by figures once
        runs = [StaticRun(p.run["arch"], p.seed, p.run, p.run_dir) for p in results.points]
        _, table = schedule_evidence(runs)
        lines += [f"### {base}", "", *table, ""]
    return lines


# ---------------------------------------------------------------- the report


def series_points(results: Results) -> list[dict]:
    """One point per (series, k_cpt or static net): seed means, for the accuracy/MACs plot."""
    groups: dict[tuple, list[Point]] = {}
    for p in results.points:
        key = (p.series.label, p.series.folder, p.k_cpt if p.series.agent != "static" else p.run["arch"])
        groups.setdefault(key, []).append(p)
    return [{"series": label, "accuracy": statistics.fmean(p.accuracy for p in group),
             "mean_macs": statistics.fmean(p.mean_macs for p in group)} for (label, _, _), group in groups.items()]


def mean_std(values: Sequence[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f}"


def numbers_table(results: Results) -> list[str]:
    """Every point: test accuracy and margin over the static frontier, mean ± std over seeds."""
    lines = ["| series | folder | point | seeds | test accuracy (%) | mean MACs | vs static frontier (pts) |",
             "|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[Point]] = {}
    for p in results.points:
        groups.setdefault((p.series.label, p.series.folder, p.run["arch"] if p.series.agent == "static" else p.k_cpt), []).append(p)
    for (label, folder, key), group in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], str(g[0][2]))):
        point = key if isinstance(key, str) else f"k_cpt {key:g}"
        if group[0].series.agent == "static":  # the learning rate each seed's net was chosen at
            point += f" (lr {', '.join(format(p.run['config']['lr'], 'g') for p in group)})"
        margins = [m for m in (results.frontier_margin(p) for p in group) if m is not None]
        shown = "—" if group[0].series.agent == "static" else mean_std(margins)
        lines.append(f"| {label} | {folder} | {point} | {', '.join(str(p.seed) for p in group)} | "
                     f"{mean_std([100 * p.accuracy for p in group])} | "
                     f"{statistics.fmean(p.mean_macs for p in group) / 1e6:.2f}M | {shown} |")
    return lines


def exits_table(results: Results) -> list[str]:
    """Each learner's own exits, every one used for every test image (``heads_alone``), mean
    over seeds, beside the static net of as many columns. The paper's learners train a head on
    the images routed to it, so a head the routing specialised (sent only photos, say) or
    starved (sent nothing) reads far under the static net: with the routing, this says what
    each exit learned from. Learners on the chain only (a tree's leaves do not line up with
    the static nets)."""
    static: dict[tuple[str, str], list[float]] = {}
    for p in results.points:
        if p.series.agent == "static":
            static.setdefault((p.series.base, p.run["arch"]), []).append(100 * p.accuracy)
    groups: dict[tuple, dict[int, dict]] = {}  # one run's heads once, a dynamic net's from its first evaluation
    for p in results.points:
        heads = p.evaluation.get("heads_alone")
        if p.series.agent != "static" and p.run["arch"] == "chain" and heads:
            key = (p.series.label, p.series.folder, p.series.base, "dynamic" if p.series.dynamic else p.k_cpt)
            groups.setdefault(key, {}).setdefault(p.seed, heads)
    if not groups:
        return []
    exits = list(next(iter(next(iter(groups.values())).values())))
    lines = ["| series | folder | point | " + " | ".join(exits) + " |", "|---|---|---|" + "---|" * len(exits)]
    for (label, folder, _, key), by_seed in groups.items():
        runs = list(by_seed.values())
        point = key if isinstance(key, str) else f"k_cpt {key:g}"
        cells = [f"{statistics.fmean(100 * r[e]['accuracy'] for r in runs):.1f}" if all(e in r for r in runs) else "—"
                 for e in exits]
        lines.append(f"| {label} | {folder} | {point} | " + " | ".join(cells) + " |")
    for base in dict.fromkeys(b for _, _, b, _ in groups):
        cells = [f"{statistics.fmean(static[(base, f'static-{n}')]):.1f}" if (base, f"static-{n}") in static else "—"
                 for n in range(1, len(exits) + 1)]
        lines.append(f"| static nets (static-1 … static-{len(exits)}) | {base} | — | " + " | ".join(cells) + " |")
    return lines


def shortfall_table(results: Results) -> list[str]:
    """Why a chain learner's point lies under the static frontier, per seed, for each point under
    it on the mean over seeds. The margin splits exactly into three parts: what the routing adds
    over the exit it sends most images to (that exit used for every image, ``heads_alone``),
    what that exit lacks against the static net of as many columns, and how far that static
    net lies under the frontier at the routed MACs. A routing fault shows in the first part; a
    head the training left weaker than a net of its own (its columns shared with deeper heads,
    or starved by the routing) in the second."""
    groups: dict[tuple, list[Point]] = {}
    for p in results.points:
        if p.series.agent != "static" and p.run["arch"] == "chain" and p.evaluation.get("leaves"):
            groups.setdefault((p.series.label, p.series.folder, p.k_cpt), []).append(p)
    rows = []
    for (label, folder, k_cpt), group in groups.items():
        margins = [results.frontier_margin(p) for p in group]
        if None in margins or statistics.fmean(margins) >= 0:
            continue
        for p, margin in sorted(zip(group, margins), key=lambda pm: pm[0].seed):
            main, leaf = max(p.evaluation["leaves"].items(), key=lambda item: item[1]["fraction"])
            alone = p.evaluation.get("heads_alone", {}).get(main, {}).get("accuracy")
            static = results.static_net(p, f"static-{main.removeprefix('exit')}")
            if alone is None or static is None:
                continue
            routing, head, net = (100 * (p.accuracy - alone), 100 * (alone - static.accuracy),
                                  100 * (static.accuracy - results.frontier_at(p)))
            rows.append(f"| {label} | {folder} | k_cpt {k_cpt:g} | {p.seed} | {margin:+.2f} | "
                        f"{main} ({100 * leaf['fraction']:.0f}%) | {routing:+.2f} | {head:+.2f} | {net:+.2f} |")
    if not rows:
        return []
    return ["| series | folder | point | seed | vs static frontier (pts) | exit most images take | routing over that "
            "exit alone | that exit alone − static net of as many columns | that static net − frontier |",
            "|---|---|---|---|---|---|---|---|---|", *rows]


def draw(figure: Figure, results: Results, planned: list[tuple[Series, TrainConfig]], out: Path) -> list[Path]:
    """The figure's PNGs: per dataset and width its accuracy/MACs plot (seed means, one series
    per learner and setting, the static nets as the baseline), and per run folder the
    node-link diagrams and routing heatmaps of the first seed's runs
    (:func:`~routing_rl.app.figures.write_figures`, whose other files stay beside them)."""
    written = []
    out.mkdir(parents=True, exist_ok=True)
    for base in dict.fromkeys(s.base for s in figure.series):
        points = series_points(Results([p for p in results.points if p.series.base == base], []))
        if points:
            plot = accuracy_macs_figure(points, f"{figure.title}: {base}")
            plot.savefig(out / f"accuracy_macs_{base}.png", dpi=120)
            plt.close(plot)
            written.append(out / f"accuracy_macs_{base}.png")
    first = min(results.seeds(), default=0)
    for folder in dict.fromkeys(s.folder for s in figure.series if s.agent != "static"):
        run_dirs = [Path(c.logdir) / c.run_name for s, c in planned if s.folder == folder and s.agent != "static"
                    and c.seed == first and (Path(c.logdir) / c.run_name / METRICS_FILE).is_file()]
        if run_dirs:
            drawn = write_figures(run_dirs, out / folder, f"{folder}, seed {first}")
            written += [path for path in drawn if path.name in ("node_link.png", "routing_heatmap.png")]
    return written


def figure_section(figure: Figure, results: Results, written: Sequence[Path], report: Path, commands: str,
                   budget: dict, verdicts: list[str]) -> list[str]:
    """The figure's part of the report; appends a row per claim to ``verdicts`` (the summary
    table: the claim's verdict and each part's, e.g. per learner)."""
    def link(path: Path) -> str:
        return os.path.relpath(path, report.parent)

    lines = [f"## {figure.title}", "", f"```bash\n{commands}\n```", ""]
    if results.missing:
        lines += [f"Runs not finished ({len(results.missing)}): {', '.join(results.missing[:8])}"
                  + (" …" if len(results.missing) > 8 else "") + ".", ""]
    for path in written:
        if path.suffix == ".png":
            lines.append(f"![{path.stem}]({link(path)})")
    lines += [""]
    for i, claim in enumerate(figure.claims, 1):
        outcome = claim.measure(results)
        lines += [f"**Claim {i}.** {claim.statement}", "", f"- the paper: {claim.paper}",
                  f"- verdict: **{outcome.verdict}** — {outcome.reason}"]
        by_part = "; ".join(f"{name}: {part}" for name, part, _ in outcome.parts) or "—"
        verdicts.append(f"| {figure.name} | {re.sub(r' [(]here:[^)]*[)]', '', claim.statement)} | "
                        f"**{outcome.verdict}** | {by_part} |")
        for name, values in outcome.numbers.items():
            spread = " (mean ± std)" if len(values) > 1 else ""
            lines.append(f"- {name}: {mean_std(values)}{spread}; per seed: {', '.join(f'{v:+.2f}' for v in values) or 'none'}")
        lines.append("")
    lines += ["Measured points (test split; mean ± std over seeds):", "", *numbers_table(results), ""]
    tables = (("Each learner's exits, each used for every test image (%, mean over seeds), beside the static nets: a "
               "head learns from the images routed to it, so one the routing specialised or starved reads under the "
               "static net of as many columns (a dynamic-k_cpt net has one set of heads for every k_cpt):",
               exits_table(results)),
              ("Where a learner's mean lies under the static frontier, each seed's margin in three parts that sum to "
               "it: what its routing adds over the exit most images take, what that exit lacks against a static net "
               "of as many columns, and that static net against the frontier at the routed MACs:",
               shortfall_table(results)))
    for intro, table in tables:
        if table:
            lines += [intro, "", *table, ""]
    lines += [f"Budget: {budget['runs']} runs, {budget['finished']} finished, {budget['measured_hours']:.2f} training hours "
              f"measured; {budget['left_worker_hours']:.1f} wall hours still to train on {budget['workers']} workers "
              "(estimate).", ""]
    return lines


# ---------------------------------------------------------------- the command


def main(argv: list[str] | None = None, prog: str = "reproduce_paper.py") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    names = list(figures())
    parser.add_argument("--figure", nargs="+", default=["all"], choices=[*names, "all"], help="figures to reproduce (default: all)")
    parser.add_argument("--preset", default="cpu-small", help="schedule of every run (default: cpu-small)")
    add_schedule_arguments(parser)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds (default: 0 1 2)")
    parser.add_argument("--figure-seeds", nargs="+", default=[], metavar="FIGURE=SEEDS",
                        help="a figure's seeds in place of --seeds, comma-separated (e.g. hybrid=0,1,2,3,4 where its "
                             "claims need more seeds than the others'); each list holds the first of --seeds, whose "
                             "static nets choose the learning rates")
    parser.add_argument("--k-cpts", nargs="+", type=float, default=list(K_CPTS), help=f"k_cpt values (default: {K_CPTS})")
    parser.add_argument("--static", nargs="+", type=int, default=list(STATIC_COLUMNS), help="static nets by columns (default: 1..8)")
    parser.add_argument("--widths", nargs="+", type=int, default=[1, 2, 3], help="capacity figure widths (default: 1 2 3)")
    parser.add_argument("--static-lr", nargs="+", default=[format(lr, "g") for lr in STATIC_LRS],
                        help="static nets' learning rate; several: each net of the first seed trains at each, and the one "
                             "with the best validation accuracy is its point and the later seeds' rate (default: "
                             f"{' '.join(format(lr, 'g') for lr in STATIC_LRS)}); auto: one for every net, chosen on "
                             "validation per dataset and width by static-8's trials (the deep net's rate starves the "
                             "shallow ones)")
    parser.add_argument("--lr-iterations", type=int, default=None,
                        help="iterations of each --static-lr auto trial (default: 400, or the runs' iterations when fewer)")
    parser.add_argument("--data-dir", default=None, help="folder with your data copies")
    parser.add_argument("--device", default="auto", help="torch device (default: auto)")
    parser.add_argument("--logdir", default="runs/paper", help="folder of the run folders (default: runs/paper)")
    parser.add_argument("--figures-dir", default="figures/paper", help="folder for the figures (default: figures/paper)")
    parser.add_argument("--report", default="docs/reproduction.md", help="the report to write (default: docs/reproduction.md)")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and the estimated budget; train nothing")
    parser.add_argument("--report-only", action="store_true",
                        help="write the report from the runs that have finished; train nothing (the others are listed as "
                             "not finished, and claims short of seeds are not resolved)")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    retain_freed_memory()
    return exit_status(parser.prog, lambda: _reproduce(args, parser.prog))


def parse_figure_seeds(pairs: Sequence[str], chosen: Sequence[str], first_seed: int) -> dict[str, list[int]]:
    """``--figure-seeds`` pairs (``hybrid=0,1,2,3,4``) as figure name → seeds."""
    out = {}
    for pair in pairs:
        name, _, text = pair.partition("=")
        if name not in chosen:
            raise RunError(f"--figure-seeds {pair!r}: {name!r} is not among the figures chosen ({', '.join(chosen)}); "
                           "give FIGURE=SEEDS for one of them, e.g. hybrid=0,1,2,3,4")
        try:
            seeds = list(dict.fromkeys(int(seed) for seed in text.split(",")))
        except ValueError:
            raise RunError(f"--figure-seeds {pair!r}: seeds are whole numbers separated by commas, e.g. "
                           f"{name}=0,1,2,3,4") from None
        if first_seed not in seeds:
            raise RunError(f"--figure-seeds {pair!r} must hold seed {first_seed}, the first of --seeds: its static "
                           "nets choose every later seed's learning rate")
        out[name] = seeds
    return out


def schedule_flags(args, seeds: Sequence[int]) -> list[str]:
    """The flags that decide which runs a figure of ``seeds`` has and how they train (not where
    they train), so that the report's commands reproduce its numbers."""
    flags = ["--preset", args.preset, "--seeds", *map(str, seeds), "--k-cpts", *(f"{k:g}" for k in args.k_cpts),
             "--static", *map(str, args.static)]
    if args.iterations:
        flags += ["--iterations", str(args.iterations)]
    if args.widths != [1, 2, 3]:
        flags += ["--widths", *map(str, args.widths)]
    if args.static_lr != "auto":
        flags += ["--static-lr", *(f"{lr:g}" for lr in args.static_lr)]
    elif args.lr_iterations is not None:
        flags += ["--lr-iterations", str(args.lr_iterations)]
    if args.set:
        flags += ["--set", *args.set]
    return flags


def _reproduce(args, prog: str) -> int:
    if args.static_lr == ["auto"]:
        args.static_lr = "auto"
    else:
        try:
            args.static_lr = list(dict.fromkeys(float(lr) for lr in args.static_lr))
        except ValueError:
            raise RunError(f"--static-lr must be numbers or auto, got {' '.join(args.static_lr)!r}") from None
    if args.preset not in PRESET_VALUES:
        raise RunError(f"unknown preset {args.preset!r}; choose one of {', '.join(PRESET_VALUES)}")
    if 1 not in args.widths:
        raise RunError("--widths must include 1, the capacity figure's baseline")
    check_out_folder(Path(args.figures_dir), "--figures-dir")  # before hours of training, not after
    check_out_folder(Path(args.report).parent, "--report's folder")
    catalogue = figures(sorted(args.k_cpts), sorted(args.widths))
    chosen = [catalogue[n] for n in (catalogue if "all" in args.figure else dict.fromkeys(args.figure))]
    seeds_of = parse_figure_seeds(args.figure_seeds, [f.name for f in chosen], args.seeds[0])
    later_seeds = [s for s in dict.fromkeys([*args.seeds, *(s for seeds in seeds_of.values() for s in seeds)])
                   if s != args.seeds[0]]
    logdir = Path(args.logdir)
    machine = {"data_dir": args.data_dir, "device": args.device,
               **schedule_fields(args, SET_BY_FLAG, "the reproduction")}
    statics = {s.folder: s for f in chosen for s in f.series if s.agent == "static"}
    lr_of = {folder: ([None] if args.static_lr == "auto" else args.static_lr) for folder in statics}
    plan = functools.partial(plan_runs, chosen, args.preset, k_cpts=sorted(args.k_cpts), static_columns=args.static,
                             static_lrs=lr_of, logdir=logdir, machine=machine, figure_seeds=seeds_of)
    first_seed = plan(seeds=args.seeds[:1], figure_seeds={})
    lr_choices = static_lr_choices(first_seed, lr_of)
    stand_ins = {(folder, f"static-{n}"): lrs[0] for folder, lrs in lr_of.items() for n in args.static
                 if len(lrs) > 1 and (folder, f"static-{n}") not in lr_choices}
    if args.dry_run:  # count a later seed's static net once, at a stand-in rate, before the first seed has chosen
        lr_choices = {**stand_ins, **lr_choices}
    planned = plan(seeds=args.seeds, lr_choices=lr_choices)
    configs = unique_configs(planned)
    run_backend = backend(args, configs)
    rows = {f.name: budget_row(unique_configs({f.name: planned[f.name]}), run_backend["workers"] or 1) for f in chosen}
    rows["all (shared runs once)"] = budget_row(configs, run_backend["workers"] or 1)
    if args.dry_run:
        for figure in chosen:
            print(f"{figure.name}:")
            for series, config in planned[figure.name]:
                run_dir = Path(config.logdir) / config.run_name
                state = "complete" if (run_dir / METRICS_FILE).is_file() else "resume" if has_checkpoint(run_dir, config) else "new"
                print(f"  {series.folder}/{config.run_name}  ({series.label}, {state})")
        if stand_ins and later_seeds:
            print(f"{len(stand_ins)} static nets of seeds {', '.join(map(str, later_seeds))} are listed at "
                  f"{args.static_lr[0]:g} until seed {args.seeds[0]} has chosen their rate on validation")
        if args.static_lr == "auto":
            trial = args.lr_iterations or lr_trial_iterations(args.preset, machine.get("iterations"))
            print(f"plus {len(statics) * len(LR_CANDIDATES)} learning-rate trials of {trial} iterations "
                  f"(static-8 at {', '.join(f'{lr:g}' for lr in LR_CANDIDATES)}) in {', '.join(statics)}")
        print("\n".join(budget_table(rows)))
        return 0
    if args.static_lr == "auto" and not args.report_only:  # a static run's folder name does not depend on its lr
        for folder, series in statics.items():
            lr_of[folder] = [select_static_lr(LR_CANDIDATES, args.lr_iterations, preset=args.preset, seed=args.seeds[0],
                                             backend=run_backend, **machine,
                                             **series.settings,
                                             logdir=str(logdir / folder))]
        planned = plan_runs(chosen, args.preset, args.seeds, sorted(args.k_cpts), args.static, lr_of, logdir, machine,
                            figure_seeds=seeds_of)
        configs = unique_configs(planned)
    failure = None
    if not args.report_only:
        try:
            if later_seeds and any(len(lrs) > 1 for lrs in lr_of.values()):
                # the first seed's static nets at every rate, then the rest with the rates they chose
                run_sweep(unique_configs({name: [(series, config) for series, config in pairs if series.agent == "static"]
                                          for name, pairs in first_seed.items()}), **run_backend)
                planned = plan(seeds=args.seeds, lr_choices=static_lr_choices(first_seed, lr_of))
                configs = unique_configs(planned)
            run_sweep(configs, **run_backend)
        except SweepError as error:  # report what finished, then say what did not
            failure = error
    report = Path(args.report)
    def command(figure: str) -> str:
        return " ".join(["python experiments/reproduce_paper.py --figure", figure,
                         *schedule_flags(args, seeds_of.get(figure, args.seeds))])

    static_lr = ("chosen on validation per dataset and width" if args.static_lr == "auto" else
                 f"{args.static_lr[0]:g}" if len(args.static_lr) == 1 else
                 f"each net trained at {', '.join(f'{lr:g}' for lr in args.static_lr)} on the first seed, the best on its "
                 f"validation for every seed")
    own_seeds = "".join(f" ({name}: {', '.join(map(str, seeds))})" for name, seeds in seeds_of.items())
    lines = ["# Reproducing the paper's experiments (Section 5)", "",
             f"Preset `{args.preset}`{f', {args.iterations} iterations' if args.iterations else ''}, seeds "
             f"{', '.join(map(str, args.seeds))}{own_seeds}, k_cpt {', '.join(f'{k:g}' for k in sorted(args.k_cpts))}, static nets "
             f"{', '.join(map(str, args.static))} (learning rate: {static_lr})"
             + (f", other fields {', '.join(args.set)}" if args.set else "") + ". "
             "Written by `experiments/reproduce_paper.py` (`routing_rl/app/reproduce.py`, whose docstring defines the "
             "verdicts: the mean difference over seeds against twice its standard error).", ""]
    left_out = [name for name in catalogue if name not in {f.name for f in chosen}]
    if left_out:
        lines += [f"Not in this report: {', '.join(left_out)} (reports at other schedules are listed in "
                  "`docs/results/index.md`).", ""]
    rows = {name: budget_row(unique_configs({name: planned[name]}) if name in planned else configs, row["workers"])
            for name, row in rows.items()}  # measured now that the runs have trained
    sections, verdicts = [], ["| figure | claim | verdict | by part |", "|---|---|---|---|"]
    for figure in chosen:
        results = read_results(planned[figure.name], sorted(args.k_cpts))
        written = draw(figure, results, planned[figure.name], Path(args.figures_dir) / figure.name) if results.points else []
        sections += figure_section(figure, results, written, report, command(figure.name),
                                   rows[figure.name], verdicts)
    lines += ["## Verdicts", "", *verdicts, "", *schedule_section(chosen, planned, sorted(args.k_cpts)),
              "## Compute budget", "", *budget_table(rows), "",
              "CPU hours are measured for the finished runs; the others are estimated at the training time per MAC of "
              "full evaluation that the finished runs of the same learner and net measured, or where none has finished "
              "the README's static-8 step timing, scaled by each net's MACs; GPU estimates scale the README's step "
              "timings by each net's column instances; the wall hours on N workers assume a perfect split; the H200 "
              "column scales the H100 one by "
              f"the wall time the hybrid grid measured at 8 runs per GPU ({PACKED_GPU_SHARE:.2f} of its estimate one "
              "run at a time; the README's sweeps section).", "", *trained_on_gpus(configs),
              *paper_schedule(configs, rows["all (shared runs once)"]), "", *sections]
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines))
    print(f"wrote {report}")
    if failure is not None:
        raise failure
    return 0
