"""Whether a schedule trains the static nets: the evidence a reproduction's schedule rests on.

The paper's claims compare learners with static nets 1–8 and say the deep ones overfit; both
need nets that have finished learning. A schedule passes when, on the mean over seeds,

* every static net's validation accuracy rises by less than :data:`RISE_LIMIT` points over
  the last quarter of training (its last evaluation against the last one at or before
  :data:`LAST_QUARTER` of its iterations), and
* the deep nets (:data:`DEEP`) fit their own training batches at least as well as
  :data:`REFERENCE` (``charts/train_accuracy`` over the last tenth of training): a deep net
  less accurate on its training batches than a shallow one under-fits, and "overfits"
  cannot be judged on it.

The rise is read off the runs' validation history, so the runs must evaluate at or before
three quarters of training (``eval_every`` ≤ a quarter of the iterations).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from routing_rl.app.runs import TRAIN_FIT_FIELD, logged_train_accuracy

RISE_LIMIT = 1.0
"""Accuracy points a trained net's validation accuracy may still gain over the last quarter."""
LAST_QUARTER = 0.75
DEEP = ("static-7", "static-8")
REFERENCE = "static-3"


@dataclass(frozen=True)
class StaticRun:
    """One finished static run: its arch (``static-N``), seed, ``metrics.json`` and folder."""

    arch: str
    seed: int
    run: dict
    run_dir: Path | None


def validation_curve(run: dict) -> list[tuple[int, float]]:
    """(iteration, validation accuracy in %) at each of the run's evaluations."""
    return [(entry["iteration"], 100 * entry["evaluations"][0]["accuracy"])
            for entry in run.get("history") or () if entry.get("evaluations")]


def late_rise(run: dict) -> float | None:
    """Validation accuracy points gained over the last quarter of training; None when the run
    has no evaluation at or before :data:`LAST_QUARTER` of its iterations."""
    curve = validation_curve(run)
    if not curve:
        return None
    last_iteration, last = curve[-1]
    earlier = [accuracy for iteration, accuracy in curve if iteration <= LAST_QUARTER * last_iteration]
    return last - earlier[-1] if earlier else None


def train_accuracy(run: dict, run_dir: Path | None) -> float | None:
    """The run's training-batch accuracy (0..1) over the last tenth of its logged steps: what
    its ``metrics.json`` records (:data:`~routing_rl.app.runs.TRAIN_FIT_FIELD`), read from its
    TensorBoard events where the record lacks it; None where neither has it. The record is what
    lets a report be written again from committed run records, which keep no events."""
    recorded = run.get(TRAIN_FIT_FIELD)
    return recorded if isinstance(recorded, (int, float)) else logged_train_accuracy(run_dir)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _shown(value: float | None, sign: bool = False) -> str:
    return "—" if value is None else f"{value:+.2f}" if sign else f"{value:.2f}"


def schedule_evidence(runs: Sequence[StaticRun]) -> tuple[bool | None, list[str]]:
    """Whether the schedule trains these static nets (None: the runs cannot tell), and the
    report's lines: per net its learning rate per seed, the validation curve, the last
    quarter's rise, the training-batch and the test accuracy (means over seeds), then the
    verdict in one sentence."""
    by_arch: dict[str, list[StaticRun]] = {}
    for run in sorted(runs, key=lambda r: (int(r.arch.rsplit("-", 1)[1]), r.seed)):
        by_arch.setdefault(run.arch, []).append(run)
    if not by_arch:
        return None, ["No static net has finished."]
    lines = ["| static net | seeds | lr | validation accuracy over training (%) | rise over the last quarter (pts) | "
             "training-batch accuracy, last tenth (%) | test accuracy (%) |", "|---|---|---|---|---|---|---|"]
    rises, fits = {}, {}
    for arch, group in by_arch.items():
        curves = [validation_curve(r.run) for r in group]
        iterations = [i for i, _ in curves[0]]
        shared = [i for i in iterations if all(i in dict(c) for c in curves)]
        curve = ", ".join(f"{i:,}: {statistics.fmean(dict(c)[i] for c in curves):.1f}" for i in shared)
        rises[arch] = _mean([late_rise(r.run) for r in group])
        fit = _mean([train_accuracy(r.run, r.run_dir) for r in group])
        fits[arch] = None if fit is None else 100 * fit
        test = _mean([100 * r.run["test_accuracy"] for r in group if r.run.get("test_accuracy") is not None])
        lrs = ", ".join(format(r.run["config"]["lr"], "g") if "config" in r.run else "—" for r in group)
        lines.append(f"| {arch} | {', '.join(str(r.seed) for r in group)} | {lrs} | {curve} | {_shown(rises[arch], True)} | "
                     f"{_shown(fits[arch])} | {_shown(test)} |")
    known = {arch: rise for arch, rise in rises.items() if rise is not None}
    deep = [arch for arch in DEEP if arch in fits]
    if not known or REFERENCE not in fits or not deep or None in [fits[a] for a in (REFERENCE, *deep)]:
        return None, [*lines, "", f"Not enough runs to judge the schedule (it needs a validation point at or before "
                      f"{LAST_QUARTER:.0%} of training, {REFERENCE} and {' or '.join(DEEP)} with logged training accuracy)."]
    steepest = max(known, key=known.get)
    still_learning = [arch for arch, rise in known.items() if rise >= RISE_LIMIT]
    under = [arch for arch in deep if fits[arch] < fits[REFERENCE]]
    trained = not still_learning and not under
    said = (f"**{'Trained' if trained else 'Not trained'} at this schedule.** The steepest last quarter is "
            f"{steepest}'s ({known[steepest]:+.2f} points; limit {RISE_LIMIT:g})"
            + (f", and {', '.join(still_learning)} still gain {RISE_LIMIT:g} point or more" if still_learning else "")
            + f"; on their training batches {', '.join(f'{a} fits {fits[a]:.2f}%' for a in deep)} against "
              f"{REFERENCE}'s {fits[REFERENCE]:.2f}%"
            + (f" ({', '.join(under)} under-fit{'s' if len(under) == 1 else ''}: over-fitting cannot be judged)"
               if under else " (so over-fitting can be judged)") + ".")
    return trained, [*lines, "", said]
