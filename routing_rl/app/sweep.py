"""Train the set of runs behind a figure with one command, skipping runs already complete.

    python -m routing_rl.app.sweep --agents actor --k-cpts 0 4e-9 --logdir runs/hybrid --figures figures/hybrid

Each run gets a deterministic name, ``{agent}-{arch}-k{k_cpt}-s{seed}``, so a sweep run
twice finds its own runs: a run with ``metrics.json`` is skipped, a run with only a
checkpoint is resumed, anything else starts fresh.
"""

from __future__ import annotations

import argparse
import sys
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
    defaults = TrainConfig()
    task = task_for(TrainConfig(**{name: overrides.get(name) if overrides.get(name) is not None else getattr(defaults, name)
                                   for name in ("env", "dataset", "data_dir", "download")}))
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


def main(argv: list[str] | None = None, prog: str = "sweep.py") -> int:
    """The sweep's command line: train the runs, then (``--figures``) draw them."""
    from routing_rl.app.figures import write_figures

    parser = argparse.ArgumentParser(prog=prog, description="Train the runs behind a figure, skipping the ones already complete, then draw it.")
    parser.add_argument("--agents", nargs="*", default=["actor"], help="learners to train at every k_cpt (default: actor)")
    parser.add_argument("--k-cpts", nargs="*", default=["4e-9"], help="k_cpt values, or 'dynamic' (default: 4e-9)")
    parser.add_argument("--static", nargs="*", type=int, default=[], help="static nets to train, by column count")
    parser.add_argument("--static-lr", type=float, default=None, help="learning rate of the static nets (default: the preset's)")
    parser.add_argument("--seeds", nargs="*", type=int, default=[0], help="seeds (default: 0)")
    parser.add_argument("--env", default=None, help="routing task id, or PKG.MODULE:TaskId-v0 (default: routing_rl/HybridRouting-v0)")
    parser.add_argument("--arch", default=None, help="net of the routed learners (default: the task's, chain for the paper's)")
    parser.add_argument("--preset", default="cpu-small", help="schedule preset (default: cpu-small)")
    parser.add_argument("--dataset", default=None, help="the paper's dataset (default: the env's)")
    parser.add_argument("--data-dir", default=None, help="folder with your data copies")
    parser.add_argument("--device", default="auto", help="torch device (default: auto)")
    parser.add_argument("--logdir", default="runs", help="folder for the run directories (default: runs)")
    parser.add_argument("--figures", default=None, help="also write the figures of all runs to this folder")
    args = parser.parse_args(argv)
    try:
        k_cpts = [k if k == "dynamic" else float(k) for k in args.k_cpts]
        configs = sweep_configs(
            args.agents, k_cpts, args.seeds, args.static, arch=args.arch, preset=args.preset, static_lr=args.static_lr,
            env=args.env, dataset=args.dataset, data_dir=args.data_dir, device=args.device, logdir=args.logdir,
        )
        run_dirs = run_sweep(configs)
        if args.figures:
            print("\n".join(map(str, write_figures(run_dirs, args.figures))))
    except ValueError as error:
        parser.exit(2, f"{prog}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(prog="python -m routing_rl.app.sweep"))
