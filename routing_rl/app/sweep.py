"""Train the set of runs behind a figure with one command, skipping runs already complete.

Each run gets a deterministic name, ``{agent}-{arch}-k{k_cpt}-s{seed}``, so a sweep run
twice finds its own runs: a run with ``metrics.json`` is skipped, a run with only a
checkpoint is resumed, anything else starts fresh — and a run folder whose saved config is
not the requested one is never taken for it (:func:`config_differences`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from routing_rl.app.runs import METRICS_FILE, RunError, has_checkpoint, has_results, read_run, task_for, train
from routing_rl.training.config import RESUME_OVERRIDES, TrainConfig, make_config

LR_CANDIDATES = (0.1, 0.05, 0.02, 0.01)
"""Learning rates :func:`select_static_lr` tries, in order of preference on a tie."""
IGNORED_IN_COMPARISON = (*RESUME_OVERRIDES, "logdir")
"""Fields that may differ between a saved run and the requested one: the machine's, and
the logdir's spelling (the run folder is the same)."""


def run_name(config: TrainConfig) -> str:
    k_cpt = "dyn" if config.dynamic_k_cpt else f"{float(config.k_cpt):g}"
    return f"{config.agent}-{config.arch}-k{k_cpt}-s{config.seed}"


def sweep_configs(
    agents: Iterable[str],
    k_cpts: Iterable[float | str],
    seeds: Iterable[int] = (0,),
    static_columns: Iterable[int] = (),
    arch: str | None = None,
    preset: str = "cpu-small",
    static_lr: float | None = None,
    **overrides,
) -> list[TrainConfig]:
    """Every (agent, k_cpt, seed) on ``arch`` (default: the env task's, ``chain`` for the
    paper's images), plus static nets with the given column counts. ``overrides`` are config
    fields, ``env`` (any registered routing task) included.

    ``static_lr``: the static nets' learning rate when it is not the routed learners' (deep
    static nets without intermediate heads can stall at lr 0.1; choose it on validation
    with :func:`select_static_lr`).
    """
    task = task_for(overrides)
    configs = []
    static = dict(overrides, lr=static_lr) if static_lr is not None else overrides
    for seed in seeds:
        for n in static_columns:
            configs.append(make_config(preset, task.all_archs(), task.static_archs(), agent="static", arch=f"static-{n}", seed=seed, **static))
        for agent in agents:
            for k_cpt in k_cpts:
                configs.append(make_config(preset, task.all_archs(), task.static_archs(), agent=agent, arch=arch or task.default_arch(agent),
                                           k_cpt=k_cpt, seed=seed, **overrides))
    for config in configs:
        config.run_name = run_name(config)
    return configs


def config_differences(saved: TrainConfig, wanted: TrainConfig) -> list[str]:
    """``"field saved (here) vs wanted"`` for every setting of the experiment that differs."""
    have, want = dataclasses.asdict(saved), dataclasses.asdict(wanted)
    return [f"{name} {have[name]!r} (saved) vs {want[name]!r} (asked)"
            for name in want if name not in IGNORED_IN_COMPARISON and have[name] != want[name]]


def run_sweep(configs: list[TrainConfig], log=print) -> list[Path]:
    """Train every config not complete yet; returns every run directory, in order.

    Raises RunError when a run folder holds a run (a checkpoint or metrics) made with other
    settings than the requested config: it is neither skipped nor resumed nor replaced.
    """
    run_dirs = []
    for i, config in enumerate(configs, 1):
        run_dir = Path(config.logdir) / config.run_name
        run_dirs.append(run_dir)
        if has_results(run_dir):
            differences = config_differences(read_run(run_dir), config)
            if differences:
                raise RunError(f"{run_dir} holds a run with other settings than asked ({'; '.join(differences)}); "
                               "move it away, or give another --logdir")
        if (run_dir / METRICS_FILE).is_file():
            log(f"[{i}/{len(configs)}] {config.run_name}: complete, skipped")
            continue
        if has_checkpoint(run_dir, config):
            log(f"[{i}/{len(configs)}] {config.run_name}: resuming")
            metrics = train(resume=run_dir)
        else:
            log(f"[{i}/{len(configs)}] {config.run_name}: training")
            metrics = train(config, overwrite=True)
        log(f"    test accuracy {metrics['test_accuracy']:.4f} at {metrics['test_mean_macs']:.3g} MACs")
    return run_dirs


def select_static_lr(
    candidates: Sequence[float] = LR_CANDIDATES,
    iterations: int = 400,
    columns: int = 8,
    preset: str = "cpu-small",
    seed: int = 0,
    log=print,
    **overrides,
) -> float:
    """The static nets' learning rate, chosen on the validation split (never the test split).

    ``static-{columns}`` is trained for ``iterations`` at each candidate, as runs named
    ``lrsel-static-{columns}-lr{lr:g}`` that :func:`run_sweep` skips or resumes like any
    other; the candidate with the best final validation accuracy wins, a tie going to the
    candidate listed first.
    """
    if not candidates:
        raise ValueError("give at least one learning rate to choose from")
    task = task_for(overrides)
    configs = []
    for lr in candidates:
        config = make_config(preset, task.all_archs(), task.static_archs(), agent="static", arch=f"static-{columns}", lr=lr, seed=seed,
                             iterations=iterations, eval_every=iterations, **overrides)
        config.run_name = f"lrsel-static-{columns}-lr{lr:g}"
        configs.append(config)
    accuracies = []
    for run_dir in run_sweep(configs, log):
        history = json.loads((run_dir / METRICS_FILE).read_text())["history"]
        accuracies.append(history[-1]["evaluations"][0]["accuracy"])
    best = max(range(len(candidates)), key=lambda i: (accuracies[i], -i))
    log(f"static learning rate chosen on validation: {candidates[best]:g} "
        f"({', '.join(f'lr {lr:g}: {a:.4f}' for lr, a in zip(candidates, accuracies))})")
    return candidates[best]
