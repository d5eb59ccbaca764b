"""Train the set of runs behind a figure with one command, skipping runs already complete.

Each run gets a deterministic name, ``{agent}-{arch}-k{k_cpt}-s{seed}``, so a sweep run
twice finds its own runs: a run with ``metrics.json`` is skipped, a run with only a
checkpoint is resumed, anything else starts fresh.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from routing_rl.training.config import TrainConfig, make_config
from routing_rl.app.runs import METRICS_FILE, has_checkpoint, task_for, train


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
    static nets without intermediate heads can stall at lr 0.1; choose it on validation).
    """
    task = task_for(overrides)
    configs = []
    static = dict(overrides, lr=static_lr) if static_lr is not None else overrides
    for seed in seeds:
        for n in static_columns:
            configs.append(make_config(preset, task.archs, agent="static", arch=f"static-{n}", seed=seed, **static))
        for agent in agents:
            for k_cpt in k_cpts:
                configs.append(make_config(preset, task.archs, agent=agent, arch=arch or task.default_arch(agent),
                                           k_cpt=k_cpt, seed=seed, **overrides))
    for config in configs:
        config.run_name = run_name(config)
    return configs


def run_sweep(configs: list[TrainConfig], log=print) -> list[Path]:
    """Train every config not complete yet; returns every run directory, in order."""
    run_dirs = []
    for i, config in enumerate(configs, 1):
        run_dir = Path(config.logdir) / config.run_name
        run_dirs.append(run_dir)
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
