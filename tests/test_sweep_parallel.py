"""Sweeps on local worker processes and on Ray: the same results as one run after another,
a failed run named while the others finish, a killed sweep finished by running it again,
and runs packed onto GPUs (the slot logic, without CUDA)."""

from __future__ import annotations

import concurrent.futures as futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from test_cli import cache  # noqa: F401 (fixture: a scratch cache; tiny_data comes from conftest)

from routing_rl.app import workers
from routing_rl.app.runs import RunError
from routing_rl.app.sweep import SweepError, plan, run_sweep, sweep_configs
from routing_rl.training.config import TrainConfig

REPO = Path(__file__).resolve().parents[1]


def smoke(tiny_data, logdir, seed=0, **fields):
    overrides = dict(iterations=4, eval_every=2, checkpoint_every=2, data_dir=str(tiny_data), download=False,
                     validation_fraction=0.4, logdir=str(logdir), **fields)
    return sweep_configs(["actor"], [4e-9], [seed], static_columns=[2], preset="smoke", **overrides)


def results(run_dirs) -> dict:
    """What a run computed, as JSON text: its test and validation evaluations (not its wall time)."""
    out = {}
    for run_dir in run_dirs:
        metrics = json.loads((Path(run_dir) / "metrics.json").read_text())
        out[Path(run_dir).name] = json.dumps([metrics["test"], metrics["history"]])
    return out


def test_gpu_slots_give_each_gpu_runs_per_gpu_runs_in_turn():
    assert workers.gpu_slots(2, count=2) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert workers.gpu_slots(3, count=1) == ["cuda:0"] * 3
    assert workers.gpu_slots(1, count=0) == []
    with pytest.raises(RunError, match="runs-per-gpu"):
        workers.gpu_slots(0, count=1)


def test_local_workers_never_put_more_runs_on_a_gpu_than_its_slots(tiny_data, tmp_path):
    """A thread pool stands in for the processes: every run records the GPU it was handed."""
    configs = [c for seed in range(4) for c in smoke(tiny_data, tmp_path, seed=seed)]
    lock, in_flight, peak, seen = threading.Lock(), {}, {}, []

    def train(config, threads, gpu, environ):
        with lock:
            in_flight[gpu] = in_flight.get(gpu, 0) + 1
            peak[gpu] = max(peak.get(gpu, 0), in_flight[gpu])
            seen.append((config.run_name, gpu, threads))
        time.sleep(0.02)
        with lock:
            in_flight[gpu] -= 1
        return {"test_accuracy": 0.5, "test_mean_macs": 1.0, "train_seconds": 0.0}

    slots = workers.gpu_slots(2, count=2)
    with futures.ThreadPoolExecutor(len(slots)) as pool:
        done = dict(workers.local_workers(list(enumerate(configs)), slots, train=train, executor=pool))
    assert sorted(done) == list(range(len(configs)))
    assert peak == {"cuda:0": 2, "cuda:1": 2}
    assert {name for name, _, _ in seen} == {c.run_name for c in configs} and {t for _, _, t in seen} == {1}


def test_a_failed_run_is_named_and_the_others_finish(tiny_data, cache, tmp_path):
    good = smoke(tiny_data, tmp_path)[1]
    empty = tmp_path / "no-data"
    empty.mkdir()
    bad = smoke(empty, tmp_path, seed=1)[1]
    log = []
    with pytest.raises(SweepError, match=f"1 of 2 runs failed: {bad.run_name} ") as error:
        run_sweep([bad, good], log.append)
    assert "\n" not in str(error.value)
    assert (tmp_path / good.run_name / "metrics.json").is_file()
    assert any(line.startswith(f"[1/2] {bad.run_name}: failed: ") for line in log)


def test_a_run_folder_with_other_settings_is_refused_before_anything_trains(tiny_data, cache, tmp_path):
    configs = smoke(tiny_data, tmp_path)
    run_sweep(configs[:1], lambda line: None)
    changed = smoke(tiny_data, tmp_path, k_l2=1e-3)
    with pytest.raises(RunError, match="k_l2 0.0001 \\(saved\\) vs 0.001 \\(asked\\)"):
        run_sweep(changed, lambda line: None)
    assert not (tmp_path / changed[1].run_name).exists()
    with pytest.raises(RunError, match="share"):
        plan([configs[0], configs[0]])


def kill_own_worker_or_finish(config, threads, gpu, environ):
    """A worker's stand-in for :func:`workers.train_in_worker`: the run named ``*-dies``
    SIGKILLs its own worker process once the other run is in flight; the other finishes a
    while after that."""
    logdir = Path(config.logdir)
    if config.run_name.endswith("-dies"):
        while not (logdir / "survivor-started").exists():
            time.sleep(0.02)
        (logdir / "dying").touch()
        os.kill(os.getpid(), signal.SIGKILL)
    (logdir / "survivor-started").touch()
    while not (logdir / "dying").exists():
        time.sleep(0.02)
    time.sleep(2.0)  # the other worker is dead by now: a pool it shared would have failed this run too
    return {"test_accuracy": 0.5, "test_mean_macs": 1.0, "train_seconds": 0.0}


def test_a_worker_that_dies_fails_only_its_own_run(tmp_path):
    survivor, doomed = (TrainConfig(logdir=str(tmp_path), run_name=name) for name in ("run-lives", "run-dies"))
    done = dict(workers.local_workers([(0, survivor), (1, doomed)], [None, None], train=kill_own_worker_or_finish))
    assert done[0] == {"test_accuracy": 0.5, "test_mean_macs": 1.0, "train_seconds": 0.0}
    assert done[1] == {"error": "its worker process died (killed, or out of memory); run the sweep again to resume"}


def test_ray_without_ray_installed_says_how_to_install_it(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RunError, match=r'pip install -e "\.\[ray\]"'):
        run_sweep(smoke(tiny_data, tmp_path), lambda line: None, ray=True)


@pytest.mark.slow
def test_worker_processes_give_the_results_of_one_process(tiny_data, cache, tmp_path):
    sequential = run_sweep(smoke(tiny_data, tmp_path / "one"), lambda line: None)  # one thread (conftest)
    log = []
    parallel = run_sweep(smoke(tiny_data, tmp_path / "two"), log.append, workers=2)
    assert results(parallel) == results(sequential)
    assert sum(": training" in line for line in log) == 2


SWEEP_SCRIPT = """
import sys
from routing_rl.app.sweep import exit_status, run_sweep, sweep_configs

def configs(data_dir, logdir, k_cpts=(0.0, 4e-9)):
    return sweep_configs(["actor"], k_cpts, static_columns=[1], preset="smoke", iterations=30, eval_every=10,
                         checkpoint_every=3, data_dir=data_dir, download=False, validation_fraction=0.4, logdir=logdir)

if __name__ == "__main__":
    log = lambda line: print(line, flush=True)
    sys.exit(exit_status("sweep", lambda: run_sweep(configs(sys.argv[1], sys.argv[2]), log, workers=2) and 0))
"""


def long_configs(data_dir, logdir, **fields):
    """SWEEP_SCRIPT's runs: 30 iterations with a checkpoint every 3, long enough to be killed mid-run."""
    namespace = {"__name__": "sweep_script"}
    exec(SWEEP_SCRIPT, namespace)
    return namespace["configs"](str(data_dir), str(logdir), **fields)


def sweep_command(tiny_data, tmp_path) -> tuple[list[str], dict]:
    """SWEEP_SCRIPT as a command (its logdir to be appended) and its environment."""
    script = tmp_path / "sweep_script.py"
    script.write_text(SWEEP_SCRIPT)
    return [sys.executable, str(script), str(tiny_data)], {**os.environ, "OMP_NUM_THREADS": "1"}


def wait_for(condition, timeout: float, what: str):
    """``condition()``'s first true value, polled until ``timeout`` seconds; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def alive(group: int) -> bool:
    """Whether a process of process group ``group`` is still running."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def mid_run(logdir: Path) -> list[Path]:
    """The run folders holding a checkpoint but no metrics.json: runs stopped (or stopping) mid-way."""
    return [run_dir for run_dir in sorted(logdir.glob("*"))
            if (run_dir / "checkpoint.pt").is_file() and not (run_dir / "metrics.json").is_file()]


@pytest.mark.slow
def test_a_killed_sweep_run_again_finishes_with_the_uninterrupted_results(tiny_data, cache, tmp_path):
    """kill -9 of the sweep and its workers once a run has saved a checkpoint and before it
    is done; the same sweep again resumes that run (taking over the lock its dead worker
    left) and every run ends where an uninterrupted sweep's does."""
    command, env = sweep_command(tiny_data, tmp_path)
    killed = tmp_path / "killed"
    process = subprocess.Popen([*command, str(killed)], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: mid_run(killed) or process.poll() is not None, 300, "a run's first checkpoint")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    stopped = mid_run(killed)
    assert stopped, "the sweep ended before it could be killed mid-run"
    assert all((d / "run.lock").is_file() for d in stopped)  # kill -9: no one released it
    again = subprocess.run([*command, str(killed)], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    for run_dir in stopped:
        assert f"{run_dir.name}: resuming" in again.stdout
        assert f"{run_dir / 'run.lock'} was left by process" in again.stderr
    uninterrupted = run_sweep(long_configs(tiny_data, tmp_path / "uninterrupted"), lambda line: None)
    assert results(killed / d.name for d in uninterrupted) == results(uninterrupted)


@pytest.mark.slow
def test_a_sigterm_to_the_sweep_alone_stops_its_workers_with_checkpoints_and_the_rerun_finishes(tiny_data, cache,
                                                                                                   tmp_path):
    """``kill PID`` of the sweep (a scheduler's SIGTERM), not of its workers: the sweep passes
    the signal on, every worker checkpoints and releases its lock, nothing is left running,
    the sweep exits 143, and the same sweep again ends where an uninterrupted one does."""
    command, env = sweep_command(tiny_data, tmp_path)
    stopped = tmp_path / "stopped"
    process = subprocess.Popen([*command, str(stopped)], env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: mid_run(stopped) or process.poll() is not None, 300, "a run's first checkpoint")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, stderr
    assert "run the same command again" in stderr
    wait_for(lambda: not alive(process.pid), 30, "the sweep's workers to end")  # none outlives the sweep
    runs = sorted(stopped.glob("*"))
    assert mid_run(stopped), "the sweep ended before the signal reached a run"
    assert not any((d / "run.lock").exists() for d in runs)  # released on the way out, not left for a takeover
    again = subprocess.run([*command, str(stopped)], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "was left by process" not in again.stderr
    uninterrupted = run_sweep(long_configs(tiny_data, tmp_path / "uninterrupted"), lambda line: None)
    assert results(stopped / d.name for d in uninterrupted) == results(uninterrupted)


@pytest.mark.slow
def test_a_ray_sweep_gives_the_results_of_local_workers(tiny_data, cache, tmp_path):
    ray = pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[ray]" to run the Ray sweep test')
    local = run_sweep(smoke(tiny_data, tmp_path / "local"), lambda line: None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        log = []
        remote = run_sweep(smoke(tiny_data, tmp_path / "ray"), log.append, ray=True)
    finally:
        ray.shutdown()
    assert results(remote) == results(local)
    assert all((d / "config.json").is_file() for d in remote)


@pytest.mark.slow
def test_the_sweep_benchmark_times_both_modes_on_the_same_runs(real_data_dir, real_cache_dir, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(real_cache_dir))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import bench_sweep

    result = bench_sweep.run(torch.device("cpu"), runs=2, iterations=2, rounds=1)
    assert result["runs"] == 2 and len(result["speedups_by_round"]) == 1
    assert result["workers1_seconds"] > 0 and result["workers2_seconds"] > 0
    assert result["workers2_speedup"] == result["workers1_seconds"] / result["workers2_seconds"]


@pytest.mark.slow
def test_a_ray_worker_killed_mid_run_is_retried_and_resumes_to_the_uninterrupted_results(tiny_data, cache, tmp_path):
    """kill -9 of the Ray worker training a run, after the run's first checkpoint: Ray
    retries the task (:data:`~routing_rl.app.workers.RAY_RETRIES`), the retry takes over the
    dead worker's lock and resumes from the checkpoint, and the sweep ends with the results
    of an uninterrupted one."""
    ray = pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[ray]" to run the Ray sweep tests')
    configs = long_configs(tiny_data, tmp_path / "ray", k_cpts=[4e-9])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    finished, log = {}, []

    def sweep():
        try:
            finished["run_dirs"] = run_sweep(configs, log.append, ray=True)
        except BaseException as error:  # handed to the test's thread
            finished["error"] = error

    thread = threading.Thread(target=sweep, daemon=True)
    thread.start()
    try:
        run_dir = wait_for(lambda: next(iter(mid_run(tmp_path / "ray")), None) or not thread.is_alive(), 300,
                           "a run's first checkpoint")
        assert run_dir is not True, f"the sweep ended before a run could be killed mid-run: {finished}"
        owner = json.loads(wait_for(lambda: (run_dir / "run.lock").is_file() and (run_dir / "run.lock").read_text(),
                                    60, "the run's lock"))
        assert owner["pid"] != os.getpid()  # a Ray worker, not this process
        os.kill(owner["pid"], signal.SIGKILL)
        assert not (run_dir / "metrics.json").is_file(), "the run ended before its worker could be killed"
        thread.join(timeout=600)
        assert not thread.is_alive(), "the Ray sweep did not finish within 600 s of the kill"
    finally:
        ray.shutdown()
    assert "error" not in finished, finished.get("error")
    # resumed, not started again: a fresh start would have removed the killed worker's TensorBoard file
    writers = {path.name.split(".")[-2] for path in run_dir.glob("events.out.tfevents.*")}  # ...<time>.<host>.<pid>.<n>
    assert str(owner["pid"]) in writers and len(writers) == 2
    assert not (run_dir / "run.lock").exists()
    uninterrupted = run_sweep(long_configs(tiny_data, tmp_path / "uninterrupted", k_cpts=[4e-9]), lambda line: None)
    assert results(finished["run_dirs"]) == results(uninterrupted)


# --- the smoke preset shrinks every part of a sweep (issue 48) ----------------------------------


def fake_sweep(trained: list):
    """A run_sweep that records the configs and gives each run the validation accuracy of its lr."""
    def run(configs, log, **backend):
        trained.extend(configs)
        for config in configs:
            run_dir = Path(config.logdir) / config.run_name
            run_dir.mkdir(parents=True)
            (run_dir / "metrics.json").write_text(json.dumps({"history": [{"evaluations": [{"accuracy": config.lr}]}]}))
        return [Path(config.logdir) / config.run_name for config in configs]

    return run


@pytest.mark.parametrize("preset, overrides, trial", [
    ("smoke", {}, 20),  # the preset's own length, not 400 (23-24 s per static-8 trial)
    ("smoke", {"iterations": 6}, 6),
    ("quick", {}, 400),
    ("quick", {"iterations": 100}, 100),
])
def test_learning_rate_trials_are_never_longer_than_the_runs_they_choose_for(preset, overrides, trial, tmp_path,
                                                                             monkeypatch):
    from routing_rl.app import sweep

    trained = []
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep(trained))
    assert sweep.select_static_lr((0.02, 0.1), preset=preset, log=lambda line: None, logdir=str(tmp_path),
                                  **overrides) == 0.1
    assert [(c.arch, c.iterations, c.eval_every) for c in trained] == [("static-8", trial, trial)] * 2
    assert sweep.lr_trial_iterations(preset, overrides.get("iterations")) == trial


def test_a_smoke_suite_chooses_its_static_learning_rate_with_smoke_trials(tmp_path, monkeypatch, capsys):
    from routing_rl.app import suite, sweep

    trained = []
    monkeypatch.setattr(sweep, "run_sweep", fake_sweep(trained))
    monkeypatch.setattr(suite, "train_static", lambda *a, **k: (_ for _ in ()).throw(RunError("stopped after the trials")))
    assert suite.main(["--agent", "actor", "--tasks", "hybrid", "--preset", "smoke", "--static-lr", "auto",
                       "--workers", "0", "--logdir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == "suite.py: error: stopped after the trials"
    assert len(trained) == 4 and {c.iterations for c in trained} == {20}
