"""One training run, start to finish: run directory, data, learner, training, final metrics.

A run directory holds::

    config.json       the TrainConfig, written once the run has checked everything it can
    cost.json         with --cost latency: the measured profile and each node's cost
    checkpoint.pt     written atomically every checkpoint_every iterations, at the end, on Ctrl-C
    run.lock          while a process writes the run: its pid, host and start time (one writer per run)
    events.out.tfevents.*   TensorBoard
    metrics.json      the final evaluation on the test split (written last: its presence
                      means the run is complete)

``train(config)`` starts a run; ``train(resume=RUN_DIR)`` continues one from its checkpoint.
Nothing is created or deleted before the config (SB3 keyword arguments included), the
device, the data, the memory needed and the cost model have been checked; then the process
takes the run's lock (:class:`~routing_rl.core.lock.FolderLock`: a second start, ``--resume``
or ``--overwrite`` of a live run is refused naming its owner, a dead owner's lock is taken
over with a warning), and only then does ``overwrite`` remove the files a run writes
(:func:`run_files`), never anything else in the folder and nothing through a symbolic link.

Under ``torchrun`` (detected from its environment variables) every process trains its shard
of each batch and only rank 0 creates the run directory, locks it and writes into it; every process
reads ``config.json`` and ``checkpoint.pt`` on ``--resume``, so across machines the logdir
must be on a filesystem they share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

from routing_rl.core import devices
from routing_rl.core.files import atomic_write_text, read_json, remove_stale_temporaries
from routing_rl.core.k_cpt import check_k_cpt
from routing_rl.core.lock import FolderLock, LockedError, describe, live_owner
from routing_rl.core.seeds import manual_seed
from routing_rl.training.acceleration import check_cuda_graphs, flush_denormals, precision_context
from routing_rl.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from routing_rl.training.config import RESUME_OVERRIDES, TrainConfig
from routing_rl.training.footprint import check_fits
from routing_rl.training.guard import NonFiniteLossError
from routing_rl.training.learners import trains_static_nets
from routing_rl.training.distributed import Distributed
from routing_rl.data import RoutingDataset, Split
from routing_rl.envs.task import RoutingTask, task_from_env
from routing_rl.envs.factory import registered_settings
from routing_rl.app.describe import summary
from routing_rl.training.evaluate import evaluate, heads_alone
from routing_rl.training.cost import COST_FILE, run_cost_model, write_cost_model
from routing_rl.training.monitor import Monitor, write_hparams, writer_failures_in_training_thread
from routing_rl.training.splits import RunError, training_splits

CONFIG_FILE = "config.json"
CHECKPOINT_FILE = "checkpoint.pt"
METRICS_FILE = "metrics.json"
TRAIN_FIT_FIELD = "train_accuracy_last_tenth"
"""metrics.json's training-batch accuracy (0..1) over the last tenth of the logged steps
(:func:`logged_train_accuracy`; null where the learner logs none): how well the net fits what
it trains on, which whether a deep net over-fits needs, kept beside the test numbers because
run records travel without their events."""
LOCK_FILE = "run.lock"
"""Held by the process writing the run; not a result (see :func:`has_results`)."""
RUN_FILES = (CONFIG_FILE, COST_FILE, CHECKPOINT_FILE, METRICS_FILE, "events.out.tfevents.*")
"""What every run writes into its folder (glob patterns); SB3 runs add :data:`routing_rl.agents.sb3.RUN_FILES`."""
CHECKPOINTS = "checkpoints"
"""The run's subfolder (SB3 checkpoints); never followed when it is a symbolic link."""
OUT_OF_MEMORY = ("can't allocate memory", "not enough memory", "out of memory")
"""How allocators other than CUDA's (CPU, MPS) word a failed allocation."""


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; anything else must be a usable torch device
    (:func:`routing_rl.core.devices.resolve_device`, its refusal as a RunError)."""
    try:
        return devices.resolve_device(name)
    except ValueError as error:
        raise RunError(str(error)) from None


def join_processes(config: TrainConfig, device: torch.device) -> tuple[Distributed | None, torch.device]:
    """This process's place among torchrun's processes (None outside torchrun), joined to
    their process group, and the device it trains on."""
    try:
        distributed = Distributed.from_env()
        if distributed is None:
            return None, device
        if config.spec.trains_through_env and distributed.world_size > 1:
            raise RunError(f"{config.agent} trains through the routing env in one process; start it without torchrun "
                           "or with --nproc_per_node=1")
        distributed.shard(config.batch_size)
        device = distributed.place(device)
    except ValueError as error:
        raise RunError(str(error)) from None
    distributed.start(device)
    return distributed, device


def task_for(config: TrainConfig | dict) -> RoutingTask:
    """The routing task of ``config.env`` (a registered id, or ``"module:id"`` of one your
    package registers), on ``config.dataset`` when given; its data is loaded on first use.
    ``config`` may also be the fields given so far (a dict; the others take their defaults).

    Besides ``data_dir`` and ``download``, a task whose constructor takes them is given the
    run's caps: ``train_examples``, the most examples of its training split the run uses
    (``--train-examples`` plus the validation share held out of it), and ``eval_examples``
    (``--eval-examples``), so that a task that generates its data makes no more."""
    if isinstance(config, dict):
        defaults = TrainConfig()
        config = TrainConfig(**{name: config[name] if config.get(name) is not None else getattr(defaults, name)
                                for name in ("env", "dataset", "data_dir", "download", "train_examples",
                                             "eval_examples", "validation_fraction")})
    dataset = {"dataset": config.dataset} if config.dataset is not None else {}
    fraction = config.validation_fraction
    held_out = fraction if isinstance(fraction, (int, float)) and 0 < fraction < 1 else 0  # else refused by validate()
    train_examples = None if config.train_examples is None else math.ceil(config.train_examples / (1 - held_out))
    optional = {"data_dir": config.data_dir, "download": config.download, "train_examples": train_examples,
                "eval_examples": config.eval_examples}
    try:
        task, _ = task_from_env(config.env, optional=optional, **dataset)
    except (ValueError, TypeError) as error:
        raise RunError(str(error)) from None
    return task


def check_config(config: TrainConfig, task: RoutingTask) -> TrainConfig:
    """``config`` validated against ``task`` (its archs; the task's default arch when none is
    given), and by a learner that trains through the env (an SB3 agent's keyword arguments by
    SB3 itself)."""
    if config.arch is None:
        config.arch = task.default_arch(config.agent)
    config.validate(task.all_archs(), task.static_archs())
    if config.spec.trains_through_env:
        config.spec.env_training.check(config)
    return config


def with_registered_settings(values: dict, task: RoutingTask) -> tuple[dict, list[str]]:
    """``values`` (config fields; None: not given) completed by the settings ``values["env"]``
    is registered with (k_cpt, error cost, arch, ...:
    :func:`~routing_rl.envs.factory.registered_settings`), and one note for each value given
    that overrides a registered one. A registered arch with junctions is not the static agent's:
    it trains the task's static nets. RunError when the registration cannot be honoured."""
    env = values.get("env") or TrainConfig.env
    try:
        registered = registered_settings(env)
    except ValueError as error:
        raise RunError(str(error)) from None
    if trains_static_nets(values.get("agent") or TrainConfig.agent) and registered.get("arch") not in task.static_archs():
        registered.pop("arch", None)
    completed, notes = dict(values), []
    for name, value in registered.items():
        given = values.get(name)
        if given is None:
            completed[name] = value
        elif not _same_setting(name, given, value):
            notes.append(f"--{name.replace('_', '-')} {given} overrides the {name} {value!r} that {env} is registered with")
    return completed, notes


def _same_setting(name: str, given, registered) -> bool:
    if name == "k_cpt":
        try:
            return check_k_cpt(given) == check_k_cpt(registered)
        except ValueError:
            return False
    return given == registered


def run_directory(config: TrainConfig) -> Path:
    """Where ``config``'s run goes: ``logdir/run_name`` (default name: agent-arch-time)."""
    name = config.run_name or f"{config.agent}-{config.arch}-{datetime.now():%Y%m%d-%H%M%S}"
    return Path(config.logdir) / name


def check_new_run_directory(path: Path, overwrite: bool, writer: bool = True) -> None:
    """Raise RunError unless a new run may be written to ``path`` (nothing is changed).

    An existing run is replaced only with ``overwrite``, except a failed start (a config.json
    and no checkpoint or metrics), which a new start under the same name replaces; a folder
    that is not a run directory, or one a live process holds, is never touched. ``writer``:
    whether this process will write the run (under torchrun only rank 0, whose lock the
    others must not take for a stranger's)."""
    logdir = path.parent
    existing = next(p for p in (logdir, *logdir.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise RunError(f"--logdir {logdir}: {existing} is a file, not a folder; choose another --logdir")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunError(f"--logdir {logdir} is not writable (no permission in {existing}); choose another --logdir")
    check_not_a_link(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise RunError(f"{path} exists and is a file, not a run directory; choose another --run-name")
    if writer:
        check_not_in_use(path)
    if not any(p.name != LOCK_FILE for p in path.iterdir()):
        return
    if not (path / CONFIG_FILE).is_file():
        raise RunError(f"{path} exists and is not a run directory (no {CONFIG_FILE}); routing-rl will not touch it: "
                       "choose another --run-name or --logdir")
    if (path / CHECKPOINTS).is_symlink():
        raise RunError(f"{path / CHECKPOINTS} is a symbolic link (to {os.readlink(path / CHECKPOINTS)}); routing-rl "
                       "deletes nothing through links: remove the link yourself, or choose another --run-name")
    if (path / METRICS_FILE).is_file() and not overwrite:
        raise RunError(f"run directory {path} already exists and holds a finished run; pass --overwrite to replace it, or another --run-name")
    if has_results(path) and not overwrite:
        raise RunError(f"run directory {path} already exists and holds an unfinished run; pass --resume {path} to continue it, "
                       "--overwrite to replace it, or another --run-name")


def check_not_a_link(run_dir: Path) -> None:
    """Raise RunError when the run folder ``run_dir`` is itself a symbolic link: a run is
    written, replaced and resumed only in its own folder, never through a link to another."""
    if Path(run_dir).is_symlink():
        target = Path(run_dir).resolve()
        raise RunError(f"{run_dir} is a symbolic link (to {os.readlink(run_dir)}); routing-rl writes nothing through "
                       f"links: resume or replace the run at {target} itself, or choose another --run-name")


def check_not_in_use(run_dir: Path) -> None:
    """Raise RunError naming the owner when a live process holds ``run_dir``'s lock."""
    try:
        owner = live_owner(Path(run_dir) / LOCK_FILE)
    except LockedError as error:  # not a lock file: a FIFO, a folder
        raise RunError(str(error)) from None
    if owner is not None:
        raise RunError(in_use(run_dir, f"in use by process {describe(owner)}"))


def in_use(run_dir: Path, why: str) -> str:
    return (f"run directory {run_dir} is {why}; wait for that run to finish or stop it (delete {LOCK_FILE} "
            "only if that process is gone)")


def lock_run(run_dir: Path) -> FolderLock:
    """Take ``run_dir``'s lock (creating the folder): RunError naming the owner of a live one."""
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        return FolderLock(Path(run_dir) / LOCK_FILE).acquire()
    except LockedError as error:
        if error.owner is None:
            raise RunError(str(error)) from None
        raise RunError(in_use(run_dir, f"in use by process {describe(error.owner)}")) from None
    except OSError as error:
        raise RunError(f"cannot write the run directory {run_dir}: {error.strerror or error}; choose another --logdir") from None


def has_results(run_dir: Path) -> bool:
    """Whether a run directory holds anything a run trained: a checkpoint or metrics."""
    from routing_rl.agents.sb3 import latest_checkpoint

    run_dir = Path(run_dir)
    return ((run_dir / CHECKPOINT_FILE).is_file() or (run_dir / METRICS_FILE).is_file()
            or (not (run_dir / CHECKPOINTS).is_symlink() and latest_checkpoint(run_dir) is not None))


def run_folders(run_dir: Path) -> list[Path]:
    """``run_dir`` and its ``checkpoints`` subfolder, unless that is a symbolic link (whose
    target lies outside the run: never cleaned)."""
    run_dir = Path(run_dir)
    return [run_dir] + ([run_dir / CHECKPOINTS] if not (run_dir / CHECKPOINTS).is_symlink() else [])


def run_files(run_dir: Path) -> list[Path]:
    """The files in ``run_dir`` that runs write, and nothing else: none reached through a
    symbolic link to a folder; a run file that is itself a link is listed (unlinking it
    removes the link, not its target)."""
    from routing_rl.agents.sb3 import RUN_FILES as SB3_RUN_FILES

    run_dir = Path(run_dir)
    folders = run_folders(run_dir)
    return sorted({p for pattern in (*RUN_FILES, *SB3_RUN_FILES) for p in run_dir.glob(pattern)
                   if p.parent in folders and (p.is_symlink() or p.is_file())})


def create_run_directory(path: Path, config: TrainConfig) -> Path:
    """Empty ``path`` of an earlier run's files (see :func:`check_new_run_directory`), create
    it and write ``config.json``. The caller holds the run's lock."""
    if path.is_dir():
        for file in run_files(path):
            file.unlink()
        for folder in run_folders(path):
            remove_stale_temporaries(folder)
        if path / CHECKPOINTS in run_folders(path) and (path / CHECKPOINTS).is_dir() and not any((path / CHECKPOINTS).iterdir()):
            (path / CHECKPOINTS).rmdir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        config.save(path / CONFIG_FILE)
    except OSError as error:
        raise RunError(f"cannot write the run directory {path}: {error.strerror or error}; choose another --logdir") from None
    return path


def read_run(run_dir: Path, overrides: dict | None = None) -> TrainConfig:
    """The config of an existing run directory, with ``overrides`` (machine settings only)
    applied and validated like a new config; RunError naming the file when it is not one."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RunError(f"{run_dir} is not a run directory (no {CONFIG_FILE}); give the folder a run was written to")
    overrides = overrides or {}
    fixed = sorted(set(overrides) - set(RESUME_OVERRIDES))
    if fixed:
        raise RunError(f"a resumed run keeps the settings in its {CONFIG_FILE}; only {', '.join(RESUME_OVERRIDES)} "
                       f"may change, not {', '.join(fixed)} (start a new run to change them)")
    try:
        values = read_json(path)
        if not isinstance(values, dict):
            raise ValueError(f"it holds a JSON {type(values).__name__}, not an object")
        config = dataclasses.replace(TrainConfig.from_json(json.dumps(values)), **overrides)
        return check_config(config, task_for(config))
    except (ValueError, TypeError) as error:  # JSONDecodeError is a ValueError
        raise RunError(f"{path} is not a valid run config: {error}; restore it or start a new run") from None


def has_checkpoint(run_dir: Path, config: TrainConfig) -> bool:
    """Whether a run can resume: the learner's checkpoint.pt, or the checkpoint of a learner
    that trains through the env (an SB3 agent's newest zip)."""
    if config.spec.trains_through_env:
        return config.spec.env_training.has_checkpoint(run_dir)
    return (Path(run_dir) / CHECKPOINT_FILE).is_file()


def prepare_data(config: TrainConfig, task: RoutingTask) -> tuple[RoutingDataset, Split, Split, Split]:
    """(dataset, train part, validation part, test) of ``task`` as the config asks."""
    dataset = task.dataset()
    return (dataset, *training_splits(config, dataset))


def load_run(run_dir: str | Path, device: str | torch.device = "cpu"):
    """``(config, task, net)`` of a run: its config, its task and the trained net in eval mode
    (from ``checkpoint.pt``, or an SB3 agent's ``model.zip``), ready for
    :func:`~routing_rl.training.evaluate.evaluate` or for ``gym.make(config.env, net=net)``."""
    run_dir = Path(run_dir)
    config = read_run(run_dir)
    task = task_for(config)
    if config.spec.trains_through_env:
        return config, task, config.spec.env_training.load(run_dir, device).eval()
    from routing_rl.agents.registry import build_net

    if not (run_dir / CHECKPOINT_FILE).is_file():
        raise RunError(f"{run_dir} has no {CHECKPOINT_FILE}: the run has not saved a net yet")
    net = build_net(config, task, device)
    net.load_state_dict(load_checkpoint(run_dir / CHECKPOINT_FILE, device, config, net)["learner"]["net"])
    return config, task, net.eval()


def train(
    config: TrainConfig | None = None, resume: Path | None = None, overwrite: bool = False, overrides: dict | None = None
) -> dict:
    """Run training to the end and return the final metrics (also written to metrics.json).

    A resumed run keeps its saved config; ``overrides`` may change only the machine's
    settings (:data:`~routing_rl.training.config.RESUME_OVERRIDES`), e.g. to continue on another device.
    Resuming a complete run returns its metrics and trains nothing.
    """
    flush_denormals()  # first: the intra-op threads started after it inherit it
    if resume is not None:
        run_dir = Path(resume)
        check_not_a_link(run_dir)
        config = read_run(run_dir, overrides)
        if (run_dir / METRICS_FILE).is_file():
            return finished_metrics(run_dir)
        if not has_checkpoint(run_dir, config):
            raise RunError(f"{run_dir} has no {CHECKPOINT_FILE} to resume from; start it again without --resume")
        distributed, device = join_processes(config, resolve_device(config.device))
        if distributed is None or distributed.is_main:
            check_not_in_use(run_dir)
    else:
        if config is None:
            raise RunError("give a config to start a run, or a run directory to resume")
        try:
            check_config(config, task_for(config))
        except ValueError as error:
            raise RunError(str(error)) from None
        distributed, device = join_processes(config, resolve_device(config.device))
        run_dir = run_directory(config)
        if distributed is not None:  # the default name holds the time: rank 0's
            run_dir = distributed.broadcast(run_dir if distributed.is_main else None)
        check_new_run_directory(run_dir, overwrite, writer=distributed is None or distributed.is_main)
    try:
        precision_context(device, config.precision)  # a precision this device emulates is refused before anything is written
        if config.cuda_graphs:
            check_cuda_graphs(device)
    except RuntimeError as error:
        raise RunError(str(error)) from None
    try:
        with contextlib.ExitStack() as held:  # the run's lock, once _train takes it
            return _train(config, run_dir, device, resume, distributed, overwrite, held)
    finally:
        if distributed is not None:
            distributed.stop()


def logged_train_accuracy(run_dir: Path | None, tail: float = 0.1) -> float | None:
    """The run's training-batch accuracy (0..1) averaged over the last ``tail`` of its logged
    steps (``charts/train_accuracy`` in its TensorBoard events; a step logged again after a
    resume counts once, as last written); None where it was not logged. "Last written" is read
    from each event's wall time, not the files' names, which do not order two files opened in
    the same second."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    by_step: dict[int, tuple[float, float]] = {}
    for events in run_dir.glob("events.out.tfevents.*") if run_dir else ():
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0})
        accumulator.Reload()
        if "charts/train_accuracy" in accumulator.Tags()["scalars"]:
            for e in accumulator.Scalars("charts/train_accuracy"):
                if e.step not in by_step or e.wall_time >= by_step[e.step][0]:
                    by_step[e.step] = (e.wall_time, e.value)
    values = [by_step[step][1] for step in sorted(by_step)]
    return statistics.fmean(values[-max(1, round(tail * len(values))):]) if values else None


def final_validation_accuracy(metrics: dict) -> float | None:
    """A run's accuracy at its last validation (``metrics.json``'s history; None without one)."""
    history = metrics.get("history") or []
    return history[-1]["evaluations"][0]["accuracy"] if history and history[-1].get("evaluations") else None


def finished_metrics(run_dir: Path) -> dict:
    """The metrics of a complete run (said on stderr); RunError naming a damaged file."""
    path = Path(run_dir) / METRICS_FILE
    try:
        metrics = read_json(path)
        problem = metrics_problem(metrics)
        if problem is not None:
            raise ValueError(problem)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise RunError(f"{path} is damaged ({error}); the run finished: restore the file, or delete it and --resume "
                       "to evaluate the last checkpoint again") from None
    print(f"{run_dir} is complete already ({METRICS_FILE}); nothing to resume", file=sys.stderr)
    return metrics


METRICS_FIELDS = {"run": str, "agent": str, "arch": str, "k_cpt": (int, float, str), "test_accuracy": (int, float),
                  "test_mean_macs": (int, float), "train_seconds": (int, float), "test": list, "config": dict}
"""What a run's metrics.json holds at its top level, and of what type, for a finished run's
summary and its --json line."""


def metrics_problem(metrics) -> str | None:
    """Why ``metrics`` (a metrics.json's content) is not a finished run's metrics; None when it is."""
    if not isinstance(metrics, dict):
        return f"it holds a JSON {type(metrics).__name__}, not a run's metrics"
    for name, kind in METRICS_FIELDS.items():
        if isinstance(metrics.get(name), bool) or not isinstance(metrics.get(name), kind):
            return f"its {name} is {'missing' if name not in metrics else repr(metrics[name])[:40]}"
    numbers = ("accuracy", "mean_macs")
    if not metrics["test"] or not all(isinstance(e, dict) and all(isinstance(e.get(n), (int, float)) for n in numbers)
                                      for e in metrics["test"]):
        return "its test holds no evaluations with an accuracy and mean MACs"
    return None


def check_fits_all(config: TrainConfig, task: RoutingTask, device: torch.device, resident: int) -> None:
    """MemoryError unless training, the env and buffers of a learner that trains through it
    (an SB3 agent's), and a latency profile measured here all fit
    (:func:`~routing_rl.training.footprint.check_fits`)."""
    build = lambda width: task.make_net(config.arch, width, config.dynamic_k_cpt)  # noqa: E731
    check_fits(config, build, device, resident)
    if config.spec.trains_through_env:
        config.spec.env_training.check_fits(config, task, device)
    if config.cost == "latency" and config.latency_profile is None:
        check_fits(config, build, device, batch_size=config.latency_batch or config.batch_size, flag="--latency-batch")


def _train(config: TrainConfig, run_dir: Path, device: torch.device, resume: Path | None,
           distributed: Distributed | None, overwrite: bool, held: contextlib.ExitStack) -> dict:
    manual_seed(config.seed)
    task = task_for(config)
    from routing_rl.agents.registry import build_net

    try:
        dataset, train_part, validation, test = prepare_data(config, task)
        on_device = train_part.images.nbytes if device.type != "cpu" else 0  # the trainer moves the split there
        check_fits_all(config, task, device, on_device)
        # a latency profile of another net, or unreadable, is refused here, before anything is written
        saved_cost = resume is not None and (run_dir / COST_FILE).is_file()  # a resumed run's own profile
        cost = run_cost_model(config, build_net(config, task, device), run_dir if saved_cost else None)
    except (ValueError, MemoryError) as error:  # unknown dataset names, partial copies, too large: the user's to fix
        raise RunError(str(error)) from None
    from routing_rl.agents.registry import check_agent

    try:
        check_agent(config, task, task.examples(validation))
    except ValueError as error:  # what would fail after training fails now, before the run folder exists
        raise RunError(f"agent {config.agent} cannot train --arch {config.arch} of {config.env}: {error}") from None
    if distributed is None or distributed.is_main:
        held.callback(lock_run(run_dir).release)
        if resume is None:
            check_new_run_directory(run_dir, overwrite)  # again: another process may have written meanwhile
            create_run_directory(run_dir, config)
        elif (run_dir / METRICS_FILE).is_file():  # finished while this process was checking
            return finished_metrics(run_dir)
        if config.cost == "latency" and not (run_dir / COST_FILE).is_file():
            write_cost_model(run_dir / COST_FILE, cost)
        for folder in run_folders(run_dir):
            remove_stale_temporaries(folder)
    if distributed is not None:  # the other processes wait for rank 0's folder
        distributed.broadcast(run_dir if distributed.is_main else None)
    held.enter_context(writer_failures_in_training_thread())
    try:
        if config.spec.trains_through_env:
            started = time.perf_counter()
            result = config.spec.env_training.train(config, task, run_dir, device, resume=resume is not None, cost=cost,
                                                    figures=node_link_figures(summary(build_net(config, task, "cpu"))),
                                                    splits=(train_part, validation))
            net, evaluations = result.net, result.evaluations(task.examples(test))
            history, wall = result.history, time.perf_counter() - started
            with contextlib.closing(SummaryWriter(str(run_dir))) as writer:  # the learners' Monitor writes theirs
                write_hparams(writer, *run_hparams(config, evaluations))
        else:
            net, evaluations, history, wall = _train_learner(config, task, train_part, validation, test, run_dir,
                                                             device, resume, cost, distributed)
    except CheckpointError as error:  # names the file already
        raise RunError(str(error)) from None
    except NonFiniteLossError as error:
        raise RunError(f"{run_dir}: {error}") from None
    except OSError as error:
        if error.errno != errno.ENOSPC:
            raise
        raise RunError(f"no space left on device writing into {run_dir}; the checkpoints written are kept: free some "
                       f"space, then --resume {run_dir}") from None
    except (torch.OutOfMemoryError, RuntimeError, MemoryError) as error:  # MemoryError: NumPy's (SB3's buffers)
        if "without overflow" in str(error):  # a step size float32 cannot hold: the NaN guard's advice
            sb3_lr = config.resolved_values().get("sb3_kwargs", {}).get("learning_rate")
            also = f" or learning_rate in --sb3-kwargs (now {sb3_lr:g})" if sb3_lr is not None else ""
            raise RunError(f"{run_dir}: a training step overflowed float32 ({error}); lower --lr (now {config.options.lr:g}){also} "
                           "and start again with --overwrite") from None
        if not isinstance(error, (torch.OutOfMemoryError, MemoryError)) and not any(m in str(error) for m in OUT_OF_MEMORY):
            raise
        sizes = f"--batch-size (now {config.batch_size}) or --width (now {config.width})"
        if config.spec.trains_through_env:  # its policy and buffers are sized by its own settings
            sizes = config.spec.env_training.sizes(config)
        raise RunError(f"out of memory while training in {run_dir} on {device}: lower {sizes}, then start again with "
                       "--overwrite") from None
    # a router that sends everything to one exit is judged against each exit alone
    alone = heads_alone(net, task.examples(test), evaluations[0]["k_cpt"]) if net.junctions else {}
    if alone:
        evaluations = [{**evaluation, "heads_alone": alone} for evaluation in evaluations]
    metrics = {
        "run": str(run_dir),
        "agent": config.agent,
        "arch": config.arch,
        "k_cpt": config.k_cpt,
        "test_accuracy": evaluations[0]["accuracy"],
        "test_mean_macs": evaluations[0]["mean_macs"],
        "test": evaluations,
        "train_seconds": wall,
        "env": config.env,
        "cost": cost.to_json(),
        "dataset": dataset.description,
        "classes": list(task.classes),
        "sources": list(task.sources),
        "structure": summary(net),
        "history": history,
        TRAIN_FIT_FIELD: logged_train_accuracy(run_dir),
        "config": json.loads(config.to_json()),
    }
    if distributed is None or distributed.is_main:
        try:
            atomic_write_text(run_dir / METRICS_FILE, json.dumps(metrics, indent=2))
        except OSError as error:
            full = error.errno == errno.ENOSPC
            what = "no space left on device writing" if full else f"cannot write ({error.strerror or error})"
            raise RunError(f"{what} {run_dir / METRICS_FILE}; the run's checkpoints are kept: "
                           f"{'free some space' if full else 'fix the disk'}, then --resume {run_dir} to evaluate "
                           "the last one again") from None
    return metrics


def run_hparams(config: TrainConfig, evaluations: list[dict]) -> tuple[dict, dict]:
    """TensorBoard's hparams of a run: its resolved settings (not its folders; a JSON object,
    such as an SB3 agent's keyword arguments, as JSON text) and, as metrics, its test accuracy
    and mean MACs."""
    settings = {k: json.dumps(v) if isinstance(v, dict) else v for k, v in config.resolved_values().items()
                if k not in ("logdir", "data_dir")}
    return settings, {"test_accuracy": evaluations[0]["accuracy"], "test_mean_macs": evaluations[0]["mean_macs"]}


def node_link_figures(structure: dict):
    """Validation entry -> ``{"figures/node_link": figure}``: where the entry's first
    evaluation left the net of ``structure`` (:func:`~routing_rl.app.describe.summary`)."""
    from routing_rl.app.plots import node_link_figure

    return lambda entry: {"figures/node_link": node_link_figure(
        [(f"iteration {entry['iteration']}", structure, entry["evaluations"][0])])}


def write_checkpoint(path: Path, state: dict) -> None:
    """:func:`save_checkpoint`, a failed write (a full disk) a RunError that says the
    previous checkpoint is kept (the write is atomic)."""
    try:
        save_checkpoint(path, state)
    except OSError as error:
        iteration, full = state["training_state"]["iteration"], error.errno == errno.ENOSPC
        what = "no space left on device writing" if full else f"cannot write ({error.strerror or error})"
        raise RunError(f"{what} checkpoint {iteration} to {path}; the previous checkpoint is kept: "
                       f"{'free some space' if full else 'fix the disk'}, then --resume {path.parent}") from None


def _train_learner(config, task, train_part, validation, test, run_dir, device, resume, cost, distributed=None):
    from routing_rl.agents.registry import make_learner
    from routing_rl.app.trainer import fit

    learner = make_learner(config, task, device, cost)
    if distributed is not None:
        learner.distribute(distributed)
    writes = distributed is None or distributed.is_main  # every process trains and evaluates; rank 0 writes
    train_part, validation, test = task.examples(train_part), task.examples(validation), task.examples(test)
    checkpoint = load_checkpoint(run_dir / CHECKPOINT_FILE, device, config, learner.net) if resume else None
    start = checkpoint["training_state"]["iteration"] if checkpoint else 0
    monitor = Monitor(run_dir, total=config.iterations, initial=start, description=f"{config.agent} {config.arch}") if writes else None
    figures = node_link_figures(summary(learner.net))

    def draw(entry: dict) -> None:
        for tag, figure in figures(entry).items():
            monitor.figure(tag, figure, entry["iteration"])

    try:
        state = fit(
            learner,
            train_part,
            validation,
            config,
            monitor,
            save=(lambda ckpt: write_checkpoint(run_dir / CHECKPOINT_FILE, ckpt)) if writes else None,
            resume=checkpoint,
            after_validation=draw if writes else None,
            task=task,
            distributed=distributed,
        )
        evaluations = []
        for fields, k_cpt, decide in learner.evaluation_points(validation):
            evaluations.append({**fields, **evaluate(learner.net, test, k_cpt, decide, classes=task.classes,
                                                     sources=task.sources, task=task)})
        if monitor is not None:
            monitor.hparams(*run_hparams(config, evaluations))
    finally:
        if monitor is not None:
            monitor.close()
    return learner.net, evaluations, state.history, state.train_seconds
