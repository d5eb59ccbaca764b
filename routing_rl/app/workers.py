"""Where a sweep's runs train: in this process, on local worker processes, or on Ray.

A *task* is one run to train (its config); every backend calls :func:`train_run` on it and
yields ``(index, outcome)`` as runs finish, in whatever order they finish. An outcome is a
dict: ``test_accuracy``, ``test_mean_macs`` and ``train_seconds`` of a finished run, or
``error``, one line, for a run that failed (the others go on).

* in this process (``workers=0``): one run after another, with this process's threads;
* local worker processes (``workers=N``): up to N runs at a time, each in a fresh process
  (a ``concurrent.futures`` process pool of its own, ``spawn`` context) with one intra-op
  thread, so that a worker that dies fails its own run only. On GPUs there are
  ``runs_per_gpu × #GPUs`` slots, each holding one GPU that its run trains on
  (:func:`gpu_slots`);
* Ray (``ray=True`` or an address): each run a Ray task asking for one CPU, or
  ``1 / runs_per_gpu`` of a GPU, retried up to :data:`RAY_RETRIES` times when its worker
  dies; the retry resumes from the run's checkpoint. The run folders must be on a
  filesystem every node sees at the same path (the logdir is made absolute).

A run's results do not depend on the backend: a run seeds everything it draws from its
config, and one intra-op thread gives the same float rounding everywhere (a sweep in this
process matches the workers when this process also runs one thread).
"""

from __future__ import annotations

import concurrent.futures as futures
import dataclasses
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from routing_rl.app.runs import METRICS_FILE, RunError, has_checkpoint, train
from routing_rl.training.config import RESUME_OVERRIDES, TrainConfig
from routing_rl.training.interrupt import handling_signals

RAY_RETRIES = 3
"""How many times Ray starts a run again after its worker process died (killed by a signal,
out of memory, its node lost): a system failure, which Ray retries for a task with
``max_retries > 0``. The retry resumes the run from its last checkpoint (on the same host it
takes over the dead worker's ``run.lock``), so a retry costs at most ``checkpoint_every``
iterations, and three allow a run to survive a few preemptions while a run that kills its
worker every time (too large for the node's memory) still ends, named as failed. Exceptions
are not retried (``retry_exceptions=False``): :func:`train_run` returns a run's errors as its
outcome, and a bad config or a bug fails the same way every time."""
RAY_MISSING = 'the --ray sweep needs Ray: pip install -e ".[ray]" (or run without --ray on local workers)'
FORWARDED_ENV = "ROUTING_RL_"
"""Environment variables with this prefix (data folder, cache) are handed to every worker."""
Outcome = dict
Task = tuple[int, TrainConfig]


def train_run(config: TrainConfig, threads: int | None = 1, gpu: str | None = None,
              environ: dict | None = None) -> Outcome:
    """Train ``config``'s run to the end: resumed from its checkpoint when there is one (a
    retried or restarted run), skipped when complete, started fresh otherwise.

    threads: intra-op threads (None: leave as they are); gpu: the device the run trains on
    (``cuda:N``; a machine setting, so a resumed run may change it), None: the config's;
    environ: variables to set first. Errors come back as ``{"error": one line}``, never raised.
    """
    os.environ.update(environ or {})
    if gpu is not None:
        config = dataclasses.replace(config, device=gpu)
    if threads is not None:
        torch.set_num_threads(threads)
    run_dir = Path(config.logdir) / config.run_name
    try:
        with handling_signals():  # a stop before the training loop starts unwinds too, releasing the run's lock
            if (run_dir / METRICS_FILE).is_file() or has_checkpoint(run_dir, config):
                machine = {name: getattr(config, name) for name in RESUME_OVERRIDES}
                metrics = train(resume=run_dir, overrides=machine)
            else:
                metrics = train(config, overwrite=True)
    except RunError as error:
        return {"error": one_line(str(error))}
    except Exception as error:  # a bug or a broken machine: report it, let the other runs finish
        return {"error": one_line(f"{type(error).__name__}: {error}")}
    return {key: metrics[key] for key in ("test_accuracy", "test_mean_macs", "train_seconds")}


def train_in_worker(config: TrainConfig, threads: int | None = 1, gpu: str | None = None,
                    environ: dict | None = None) -> Outcome:
    """:func:`train_run` in a worker process of :func:`local_workers`. Stopped by a signal,
    the worker ends itself once the run has saved its checkpoint and released its lock: the
    pool's own clean-up would wait on a worker that ignores its SIGTERM while it checkpoints."""
    try:
        return train_run(config, threads, gpu, environ)
    except KeyboardInterrupt as stop:
        os._exit(getattr(stop, "exit_code", 130))


def one_line(text: str) -> str:
    """``text``'s lines joined into one (a sweep's log names each failed run on one line)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def in_this_process(tasks: Sequence[Task], train: Callable = train_run,
                    started: Callable[[int], None] = lambda index: None) -> Iterator[tuple[int, Outcome]]:
    """One run after another in this process, with its threads."""
    for index, config in tasks:
        started(index)
        yield index, train(config, threads=None)


def gpu_slots(runs_per_gpu: int, count: int | None = None) -> list[str]:
    """The device each of ``runs_per_gpu × #GPUs`` worker slots gives its run, GPUs taken in
    turn so that the first runs spread out: ``gpu_slots(2, count=2)`` → ``["cuda:0",
    "cuda:1", "cuda:0", "cuda:1"]``. count: the GPUs torch sees (None: ask it; it honours
    ``CUDA_VISIBLE_DEVICES``). The device is handed to the run rather than hidden from it
    through ``CUDA_VISIBLE_DEVICES``, which a worker could read only before CUDA starts."""
    if runs_per_gpu < 1:
        raise RunError(f"--runs-per-gpu must be a positive integer, got {runs_per_gpu}")
    count = torch.cuda.device_count() if count is None else count
    return [f"cuda:{gpu}" for _ in range(runs_per_gpu) for gpu in range(count)]


def uses_gpus(configs: Sequence[TrainConfig]) -> bool:
    """Whether the runs are packed onto this machine's GPUs: every run's device is ``auto``
    or ``cuda`` and CUDA is available (a run given ``cuda:N`` or ``cpu`` stays there)."""
    return bool(configs) and all(config.device in ("auto", "cuda") for config in configs) and torch.cuda.is_available()


def default_workers(configs: Sequence[TrainConfig], runs_per_gpu: int = 1) -> int:
    """``runs_per_gpu × #GPUs`` for runs on GPUs, else the CPU cores this process may use."""
    if uses_gpus(configs):
        return len(gpu_slots(runs_per_gpu))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def local_workers(tasks: Sequence[Task], slots: Sequence[str | None], train: Callable = train_in_worker,
                  executor: futures.Executor | None = None, started: Callable[[int], None] = lambda index: None,
                  ) -> Iterator[tuple[int, Outcome]]:
    """The runs on ``len(slots)`` worker processes, one intra-op thread each; a run is handed
    a slot when one is free, and trains on the slot's GPU (None: on its config's device).

    executor: where the runs go (default: a :func:`process_pool` of one process for each run,
    so that a worker killed by a signal or out of memory fails its own run only: a pool whose
    worker dies fails every run in flight on it); ``started(index)`` is called as each run is
    handed to a worker.
    """
    environ = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
    own = executor is None
    waiting, free, running = list(tasks), list(slots), {}
    try:
        while waiting or running:
            while waiting and free:
                index, config = waiting.pop(0)
                slot = free.pop(0)
                started(index)
                pool = process_pool(1) if own else executor
                running[pool.submit(train, config, 1, slot, environ)] = (index, slot, pool)
            done, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
            for future in done:
                index, slot, pool = running.pop(future)
                free.append(slot)
                try:
                    outcome = future.result()
                except futures.process.BrokenProcessPool:
                    if not own:
                        raise
                    # its checkpoint stays, so running the sweep again resumes it
                    outcome = {"error": "its worker process died (killed, or out of memory); run the sweep again to resume"}
                if own:
                    pool.shutdown(wait=True)
                yield index, outcome
    except BaseException as stop:
        # Ctrl-C reaches the workers through the terminal's process group, but a signal sent to
        # this process alone (kill PID, a scheduler's SIGTERM) does not: pass it on, so that they
        # save their checkpoints and stop too (a second signal is ignored by a stopping run)
        pools = {id(pool): pool for _, _, pool in running.values()}.values() if own else [executor]
        if own and isinstance(stop, KeyboardInterrupt):
            for pool in pools:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    if process.is_alive():
                        os.kill(process.pid, getattr(stop, "signum", signal.SIGINT))
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        raise


def process_pool(workers: int) -> futures.ProcessPoolExecutor:
    """``workers`` processes started with ``spawn`` (safe after CUDA or threads started here)."""
    return futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def ray_tasks(tasks: Sequence[Task], address: str | None = None, runs_per_gpu: int = 1,
              started: Callable[[int], None] = lambda index: None) -> Iterator[tuple[int, Outcome]]:
    """The runs as Ray tasks on the cluster at ``address`` (None: the one ``RAY_ADDRESS``
    names, or a new local one; an instance this process started already is used as it is).

    Each task asks for one CPU, or ``1 / runs_per_gpu`` GPU when the runs train on CUDA
    (``--device cuda``, or ``auto`` on a cluster with GPUs), and is retried up to
    :data:`RAY_RETRIES` times if its worker dies.
    """
    try:
        import ray
    except ImportError:
        raise RunError(RAY_MISSING) from None
    if runs_per_gpu < 1:
        raise RunError(f"--runs-per-gpu must be a positive integer, got {runs_per_gpu}")
    ours = not ray.is_initialized()
    if ours:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise RunError(f"cannot reach the Ray cluster at {address or 'RAY_ADDRESS'}: {error}; start it with "
                           "`ray start --head`, or check --ray-address") from None
    try:
        gpus = ray.cluster_resources().get("GPU", 0) > 0
        environ = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV)}
        pending, remote = {}, ray.remote(train_run)
        for index, config in tasks:
            on_gpu = config.device.startswith("cuda") or (config.device == "auto" and gpus)
            task = remote.options(num_cpus=1, num_gpus=1 / runs_per_gpu if on_gpu else 0, max_retries=RAY_RETRIES,
                                  retry_exceptions=False)
            started(index)
            pending[task.remote(absolute_paths(config), 1, None, environ)] = index
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            index = pending.pop(done[0])
            try:
                outcome = ray.get(done[0])
            except ray.exceptions.RayError as error:  # the worker died more often than it was retried
                outcome = {"error": one_line(f"{type(error).__name__}: {error}")}
            yield index, outcome
    except BaseException:
        for ref in pending:
            ray.cancel(ref)
        raise
    finally:
        if ours:
            ray.shutdown()


def absolute_paths(config: TrainConfig) -> TrainConfig:
    """``config`` with its logdir and data folder as absolute paths, for workers started in
    another folder (or on another node that mounts the same filesystem)."""
    data_dir = str(Path(config.data_dir).resolve()) if config.data_dir else None
    return dataclasses.replace(config, logdir=str(Path(config.logdir).resolve()), data_dir=data_dir)
