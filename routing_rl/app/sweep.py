"""Train the set of runs behind a figure with one command, skipping runs already complete.

Each run gets a deterministic name, ``{agent}-{arch}-k{k_cpt}-s{seed}``, so a sweep run
twice finds its own runs: a run with ``metrics.json`` is skipped, a run with only a
checkpoint is resumed, anything else starts fresh — and a run folder whose saved config is
not the requested one is never taken for it (:func:`config_differences`).

The runs are independent, so :func:`run_sweep` trains them side by side on local worker
processes or on a Ray cluster (:mod:`routing_rl.app.workers`); a run that fails is reported
with its one-line error while the others go on, and a sweep stopped at any moment (Ctrl-C,
a killed process, a lost node) finishes by running it again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from routing_rl.app.runs import (METRICS_FILE, RunError, final_validation_accuracy, has_checkpoint, has_results,
                                read_run, task_for)
from routing_rl.app.workers import default_workers, gpu_slots, in_this_process, local_workers, ray_tasks, uses_gpus
from routing_rl.training.config import RESUME_OVERRIDES, TrainConfig, make_config
from routing_rl.training.interrupt import Interrupted, handling_signals
from routing_rl.training.learners import declared_options, learner_spec

STATIC_LRS = (0.1, 0.02)
"""The static nets' learning rates by default in the suite and the reproduction, each net's
point the better on validation: one rate for every net starves some of them (the deep nets
stall at 0.1, the shallow ones crawl at 0.01; docs/suite.md, "The static frontier")."""
LR_CANDIDATES = (0.1, 0.05, 0.02, 0.01)
"""Learning rates :func:`select_static_lr` tries, in order of preference on a tie."""
LR_TRIAL_ITERATIONS = 400
"""Iterations of each learning-rate trial of :func:`select_static_lr`, unless the runs it chooses
for are shorter (:func:`lr_trial_iterations`)."""
IGNORED_IN_COMPARISON = (*RESUME_OVERRIDES, "logdir")
"""Fields that may differ between a saved run and the requested one: the machine's, and
the logdir's spelling (the run folder is the same)."""


def static_lr_flag(text: str) -> float | str:
    """``--static-lr``: a learning rate, or ``auto`` to choose it with :func:`select_static_lr`."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


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
    fields, ``env`` (any registered routing task) included, and learners' options, each given
    to the runs whose learner reads it (:func:`read_by`).

    ``static_lr``: the static nets' learning rate when it is not the routed learners' (deep
    static nets without intermediate heads can stall at lr 0.1; choose it on validation
    with :func:`select_static_lr`).
    """
    task = task_for(overrides)
    configs = []
    static = dict(overrides, lr=static_lr) if static_lr is not None else overrides
    for seed in seeds:
        for n in static_columns:
            configs.append(make_config(preset, task.all_archs(), task.static_archs(), agent="static", arch=f"static-{n}", seed=seed,
                                       **read_by("static", static)))
        for agent in agents:
            for k_cpt in k_cpts:
                configs.append(make_config(preset, task.all_archs(), task.static_archs(), agent=agent, arch=arch or task.default_arch(agent),
                                           k_cpt=k_cpt, seed=seed, **read_by(agent, overrides)))
    for config in configs:
        config.run_name = run_name(config)
    return configs


def read_by(agent: str, overrides: dict) -> dict:
    """``overrides`` shared by a sweep's runs as ``agent``'s run takes them: a learner's option
    only where the learner reads it, as a preset's half-lives are (``--set tau_half_life=100``
    changes the routing learners' schedule, not the static nets')."""
    declared, options = learner_spec(agent).option_names(), declared_options()
    return {name: value for name, value in overrides.items() if name not in options or name in declared}


def config_differences(saved: TrainConfig, wanted: TrainConfig) -> list[str]:
    """``"field saved (here) vs wanted"`` for every setting of the experiment that differs, each
    as the run trains with it (runs saved before a default became None hold its value)."""
    have, want = saved.resolved_values(), wanted.resolved_values()
    return [f"{name} {have.get(name)!r} (saved) vs {want[name]!r} (asked)"
            for name in want if name not in IGNORED_IN_COMPARISON and have.get(name) != want[name]]


class SweepError(RunError):
    """Some runs of a sweep failed (each named with its one-line error); the others finished."""


def plan(configs: Sequence[TrainConfig]) -> list[tuple[Path, str]]:
    """``(run_dir, state)`` of every config, state ``complete``, ``resume`` or ``new``.

    Raises RunError, before anything trains, when a run folder holds a run (a checkpoint or
    metrics) made with other settings than its config: it is neither skipped nor resumed nor
    replaced; or when two configs name the same run folder.
    """
    planned, seen = [], set()
    for config in configs:
        run_dir = Path(config.logdir) / config.run_name
        if run_dir.resolve() in seen:
            raise RunError(f"two runs of the sweep would share {run_dir}; give them different names or logdirs")
        seen.add(run_dir.resolve())
        if has_results(run_dir):
            differences = config_differences(read_run(run_dir), config)
            if differences:
                raise RunError(f"{run_dir} holds a run with other settings than asked ({'; '.join(differences)}); "
                               "move it away, or give another --logdir")
        state = "complete" if (run_dir / METRICS_FILE).is_file() else "resume" if has_checkpoint(run_dir, config) else "new"
        planned.append((run_dir, state))
    return planned


def run_sweep(configs: list[TrainConfig], log=print, workers: int = 0, ray: bool | str = False,
              runs_per_gpu: int = 1) -> list[Path]:
    """Train every config not complete yet; returns every run directory, in order.

    workers: 0 trains the runs one after another in this process (with its threads); N > 0
    on N worker processes with one intra-op thread each; on GPUs (every device ``auto`` or
    ``cuda``, CUDA available) ``runs_per_gpu`` runs share each GPU and ``workers`` defaults
    to ``runs_per_gpu × #GPUs``. ray: True or a cluster address trains each run as a Ray task
    (:func:`routing_rl.app.workers.ray_tasks`) instead. Runs finish alike on every backend
    (:mod:`routing_rl.app.workers`).

    Raises RunError before training anything when a run folder holds a run made with other
    settings (:func:`plan`), and SweepError at the end, naming each failed run with its
    one-line error, when some runs failed while the others trained to the end.
    """
    planned = plan(configs)
    total = len(configs)
    tasks = []
    for i, (config, (run_dir, state)) in enumerate(zip(configs, planned)):
        if state == "complete":
            log(f"[{i + 1}/{total}] {config.run_name}: complete, skipped")
        else:
            tasks.append((i, config))

    def started(i: int) -> None:
        log(f"[{i + 1}/{total}] {configs[i].run_name}: {'resuming' if planned[i][1] == 'resume' else 'training'}")

    if not tasks:
        outcomes = iter(())
    elif ray:
        outcomes = ray_tasks(tasks, None if ray is True else ray, runs_per_gpu, started)
    elif workers == 0 and not (runs_per_gpu > 1 and uses_gpus(configs)):
        outcomes = in_this_process(tasks, started=started)
    else:
        slots = gpu_slots(runs_per_gpu) if uses_gpus(configs) else [None]
        count = workers or len(slots)
        outcomes = local_workers(tasks, [slots[i % len(slots)] for i in range(min(count, len(tasks)) or 1)],
                                 started=started)
    failed = []
    for i, outcome in outcomes:
        name = configs[i].run_name
        if "error" in outcome:
            failed.append(f"{name} ({outcome['error']})")
            log(f"[{i + 1}/{total}] {name}: failed: {outcome['error']}")
        else:
            log(f"    {name}: test accuracy {outcome['test_accuracy']:.4f} at "
                f"{outcome['test_mean_macs']:.3g} MACs ({outcome['train_seconds']:.0f} s)")
    if failed:
        raise SweepError(f"{len(failed)} of {total} runs failed: {'; '.join(failed)}; the others are complete. "
                         "Fix the cause and run the same command again: finished runs are skipped, the others resume")
    return [run_dir for run_dir, _ in planned]


def lr_trial_iterations(preset: str, iterations: int | None = None) -> int:
    """Iterations of each learning-rate trial: :data:`LR_TRIAL_ITERATIONS`, or the runs' own
    (``iterations``, else the preset's) when fewer, so that a ``smoke`` sweep's trials are smoke runs too."""
    return min(LR_TRIAL_ITERATIONS, iterations or make_config(preset).iterations)


def select_static_lr(
    candidates: Sequence[float] = LR_CANDIDATES,
    trial_iterations: int | None = None,
    columns: int = 8,
    preset: str = "cpu-small",
    seed: int = 0,
    log=print,
    backend: dict | None = None,
    **overrides,
) -> float:
    """The static nets' learning rate, chosen on the validation split (never the test split).

    ``static-{columns}`` is trained for ``trial_iterations`` (default: :func:`lr_trial_iterations`) at each
    candidate and evaluated once at the end (``iterations`` and ``eval_every`` among ``overrides`` are the real
    runs', not the trials'), as runs named
    ``lrsel-static-{columns}-lr{lr:g}`` that :func:`run_sweep` skips or resumes like any
    other (``backend``: :func:`run_sweep`'s ``workers``, ``ray``, ``runs_per_gpu``); the
    candidate with the best final validation accuracy wins, a tie going to the candidate
    listed first.
    """
    if not candidates:
        raise ValueError("give at least one learning rate to choose from")
    task = task_for(overrides)
    if trial_iterations is None:
        trial_iterations = lr_trial_iterations(preset, overrides.get("iterations"))
    configs = []
    for lr in candidates:
        config = make_config(preset, task.all_archs(), task.static_archs(), agent="static", arch=f"static-{columns}", lr=lr, seed=seed,
                             **read_by("static", {**overrides, "iterations": trial_iterations, "eval_every": trial_iterations}))
        config.run_name = f"lrsel-static-{columns}-lr{lr:g}"
        configs.append(config)
    accuracies = []
    for run_dir in run_sweep(configs, log, **(backend or {})):
        accuracies.append(final_validation_accuracy(json.loads((run_dir / METRICS_FILE).read_text())))
    best = max(range(len(candidates)), key=lambda i: (accuracies[i], -i))
    log(f"static learning rate chosen on validation: {candidates[best]:g} "
        f"({', '.join(f'lr {lr:g}: {a:.4f}' for lr, a in zip(candidates, accuracies))})")
    return candidates[best]


def add_schedule_arguments(parser) -> None:
    """The flags that change every run's schedule from its preset's (:func:`schedule_fields`)."""
    parser.add_argument("--iterations", type=int, default=None, help="iterations of every run (default: the preset's)")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="other config fields of every run, values in JSON (e.g. eval_every=500 validation_fraction=0.2)")


def schedule_fields(args, own_flags: dict[str, str | None] | None = None, who: str = "the command") -> dict:
    """The config fields :func:`add_schedule_arguments`' flags give (``iterations`` None: the preset's).

    ``own_flags``: the fields ``who`` sets itself, each with the flag that sets it (None: it
    names its runs); ``--set`` giving one is a RunError naming that flag, not a second value."""
    given = fields(args.set)
    for name in given:
        if name in (own_flags or {}):
            flag = own_flags[name]
            raise RunError(f"--set {name}: {who} names every run itself; drop it" if flag is None
                           else f"--set {name}: {who} sets it from {flag}; give it there")
    return {"iterations": args.iterations, **given}


def fields(pairs: Sequence[str], flag: str = "--set") -> dict:
    """``FIELD=VALUE`` pairs, given with ``flag``, as config fields (VALUE read as JSON, else as text)."""
    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise RunError(f"{flag} takes FIELD=VALUE, got {pair!r}")
        try:
            out[name.replace("-", "_")] = json.loads(text)
        except json.JSONDecodeError:
            out[name.replace("-", "_")] = text
    return out


def add_backend_arguments(parser) -> None:
    """The flags that choose where a sweep's runs train (:func:`backend`)."""
    parser.add_argument("--workers", type=int, default=None,
                        help="local worker processes, one intra-op thread and one run each (default: the CPU cores, or "
                             "--runs-per-gpu x the GPUs; 0: one run after another in this process)")
    parser.add_argument("--ray", action="store_true",
                        help="train each run as a Ray task (pip install -e '.[ray]'): on the cluster RAY_ADDRESS names, "
                             "else on a new local Ray instance; the logdir must be on a filesystem every node shares")
    parser.add_argument("--ray-address", default=None, help="the Ray cluster to join: auto or HOST:PORT (implies --ray)")
    parser.add_argument("--runs-per-gpu", type=int, default=1,
                        help="runs that share one GPU (local workers and Ray alike; default: 1)")


def backend(args, configs: Sequence[TrainConfig]) -> dict:
    """:func:`run_sweep`'s ``workers``, ``ray`` and ``runs_per_gpu`` from the parsed flags."""
    if args.workers is not None and args.workers < 0:
        raise RunError(f"--workers must be 0 (this process) or a positive number of processes, got {args.workers}")
    if args.runs_per_gpu < 1:
        raise RunError(f"--runs-per-gpu must be a positive integer, got {args.runs_per_gpu}")
    ray = args.ray_address or args.ray
    if ray and args.workers is not None:
        raise RunError("--workers is for local worker processes; with --ray, Ray places the runs (drop one of them)")
    workers = default_workers(configs, args.runs_per_gpu) if args.workers is None else args.workers
    return {"workers": workers, "ray": ray, "runs_per_gpu": args.runs_per_gpu}


def exit_status(prog: str, body) -> int:
    """``body()``'s exit status, with a sweep's failures as one line each: 1 when runs failed
    (the others finished), 2 for bad input, 130 or 143 when stopped by Ctrl-C or SIGTERM (the
    runs in flight save their checkpoints first: :func:`~routing_rl.app.workers.local_workers`)."""
    try:
        with handling_signals():
            return body()
    except SweepError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    except ValueError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        print(f"{prog}: interrupted; the runs saved their checkpoints: run the same command again to finish",
              file=sys.stderr)
        return stop.exit_code if isinstance(stop, Interrupted) else 130
