"""Issue 25, run folders: --overwrite never deletes through a symbolic link nor before every
check has passed, one writer per run (the lock), seeds and SB3 keyword arguments checked at
config time, and the remaining tracebacks of experiments/train_agent.py as one line with exit
status 2 (tiny synthetic data)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_safety_runs import args, finished, finished_logdir, refused, snapshot  # noqa: F401  (fixtures)

from routing_rl.app import runs
from routing_rl.app.cli import main
from routing_rl.training.config import TrainConfig, make_config

REPO = Path(__file__).resolve().parents[1]
LOCK = "run.lock"


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "safety-cache"))


SB3 = ["--n-envs", "8", "--sb3-kwargs",
       '{"learning_starts": 8, "buffer_size": 512, "policy_kwargs": {"net_arch": [16]}}']
"""A small DQN: the default policy makes each of the run's four zips about 10 MB."""


@pytest.fixture(scope="module")
def finished_dqn_logdir(tiny_data, tmp_path_factory):  # noqa: F811
    logdir = tmp_path_factory.mktemp("finished-dqn")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "safety-cache"))
        assert main(args(tiny_data, logdir, "run", *SB3, agent="dqn")) == 0
    return logdir


@pytest.fixture
def finished_dqn(finished_dqn_logdir, tmp_path, capsys):
    """A complete DQN run ``logdir/run`` (a fresh copy)."""
    shutil.copytree(finished_dqn_logdir, tmp_path / "logdir")
    capsys.readouterr()
    return tmp_path / "logdir" / "run"


def dead_pid() -> int:
    """The id of a process of this host that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def plant_lock(run_dir: Path, pid: int, host: str | None = None) -> Path:
    lock = run_dir / LOCK
    lock.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": time.time()}) + "\n")
    return lock


# --- symbolic links ------------------------------------------------------------------------


def test_overwrite_never_deletes_through_a_symlinked_checkpoints_folder(finished, tiny_data, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model_5_iterations.zip").write_bytes(b"someone else's")
    (outside / ".data.a1b2c3d4.tmp").write_bytes(b"someone else's")
    (finished / "checkpoints").symlink_to(outside, target_is_directory=True)
    before, kept = snapshot(outside), snapshot(finished)
    err = refused(args(tiny_data, finished.parent, "run", "--overwrite"), capsys)
    assert "checkpoints is a symbolic link" in err and "deletes nothing through links" in err
    assert snapshot(outside) == before and snapshot(finished) == kept


def test_run_files_and_stale_temporaries_are_never_reached_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("dqn_2_iterations.zip", ".dqn_4_iterations.zip.a1b2c3d4.tmp"):
        (outside / name).write_bytes(b"x")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoints").symlink_to(outside, target_is_directory=True)
    (outside / "metrics.json").write_text("{}")
    (run_dir / "metrics.json").symlink_to(outside / "metrics.json")
    assert runs.run_files(run_dir) == [run_dir / "metrics.json"]  # the link, whose unlinking keeps its target
    assert runs.run_folders(run_dir) == [run_dir]


def test_a_symlinked_run_file_is_removed_as_a_link(finished, tiny_data, tmp_path, capsys):
    target = tmp_path / "precious.json"
    target.write_text("the user's")
    (finished / "metrics.json").unlink()
    (finished / "metrics.json").symlink_to(target)
    assert main(args(tiny_data, finished.parent, "run", "--overwrite", "--seed", "1")) == 0
    assert target.read_text() == "the user's"
    assert not (finished / "metrics.json").is_symlink() and json.loads((finished / "metrics.json").read_text())


# --- every check before --overwrite changes anything ---------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--sb3-kwargs", '{"buffer_size": "x"}'], "--sb3-kwargs buffer_size must be an integer, got 'x'"),
        (["--sb3-kwargs", '{"policy_kwargs": {"net_arch": "x"}}'], "SB3's DQN refuses them (TypeError"),
        (["--seed", "18446744073709551615"], "seed must be an integer in 0 ... 2**63 - 1"),
        (["--n-envs", "100000000000000000000"], "lower --n-envs to at most"),
        (["--cost", "latency", "--latency-batch", "100000000000000000000"], "lower --latency-batch to at most"),
        (["--cost", "latency", "--latency-profile", "/nonexistent/profile.json"], "cannot read the latency profile"),
    ],
)
def test_overwrite_keeps_a_finished_sb3_run_when_the_new_config_is_refused(extra, message, finished_dqn, tiny_data,  # noqa: F811
                                                                           capsys):
    before = snapshot(finished_dqn)
    err = refused(args(tiny_data, finished_dqn.parent, "run", "--overwrite", "--n-envs", "8", *extra, agent="dqn"), capsys)
    assert message in err
    assert snapshot(finished_dqn) == before


# --- one writer per run ---------------------------------------------------------------------


def test_a_live_run_refuses_a_second_start_resume_and_overwrite(finished, tiny_data, capsys):
    (finished / "metrics.json").unlink()  # unfinished, resumable
    plant_lock(finished, os.getppid())  # a live process of this host, not this one
    before = snapshot(finished)
    owner = f"in use by process {os.getppid()}@{socket.gethostname()} since "
    for argv in (args(tiny_data, finished.parent, "run"), args(tiny_data, finished.parent, "run", "--overwrite"),
                 ["--resume", str(finished)]):
        err = refused(argv, capsys)
        assert owner in err and "delete run.lock only if that process is gone" in err
    assert snapshot(finished) == before


def test_a_lock_from_a_dead_process_is_taken_over_with_a_warning(finished, tiny_data, capsys):
    (finished / "metrics.json").unlink()
    pid = dead_pid()
    plant_lock(finished, pid)
    assert main(["--resume", str(finished)]) == 0
    assert f"was left by process {pid}@{socket.gethostname()}" in capsys.readouterr().err
    assert not (finished / LOCK).exists(), "released at the end"
    assert (finished / "metrics.json").is_file()


def test_a_folder_holding_only_a_stale_lock_is_a_run_folder(tiny_data, tmp_path, capsys):
    """A start killed between taking the lock and writing config.json leaves only the lock."""
    (tmp_path / "run").mkdir()
    plant_lock(tmp_path / "run", dead_pid())
    assert main(args(tiny_data, tmp_path, "run")) == 0
    assert (tmp_path / "run" / "metrics.json").is_file() and not (tmp_path / "run" / LOCK).exists()


def test_a_lock_from_another_host_is_refused_and_the_lock_is_released_after_errors(tiny_data, tmp_path, capsys,
                                                                                    monkeypatch):
    (tmp_path / "run").mkdir()
    plant_lock(tmp_path / "run", 1, host="elsewhere")
    assert "in use by process 1@elsewhere" in refused(args(tiny_data, tmp_path, "run"), capsys)
    (tmp_path / "run" / LOCK).unlink()
    from routing_rl.agents.static import StaticLearner

    def interrupted(self, batch, iteration):
        raise KeyboardInterrupt

    monkeypatch.setattr(StaticLearner, "train_step", interrupted)
    assert main(args(tiny_data, tmp_path, "run")) == 130
    assert not (tmp_path / "run" / LOCK).exists(), "released on Ctrl-C"


def test_a_reused_process_id_does_not_keep_a_stale_lock(tmp_path):
    """The lock's process died and a later process got its id (as after a container restart)."""
    if not Path("/proc/self/stat").is_file():
        pytest.skip("process start times come from Linux's /proc")
    from routing_rl.core.lock import FolderLock, live_owner

    lock = tmp_path / LOCK
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname(), "started": 0.0}) + "\n")
    assert live_owner(lock) is None
    warnings = []
    FolderLock(lock).acquire(warn=warnings.append).release()
    assert len(warnings) == 1 and "no longer running" in warnings[0] and not lock.exists()


def test_the_lock_is_exclusive_and_names_its_owner(tmp_path):
    from routing_rl.core.lock import FolderLock, LockedError, live_owner

    first = FolderLock(tmp_path / "run.lock").acquire()
    assert live_owner(tmp_path / "run.lock") is None, "this process's own lock does not block it"
    with pytest.raises(LockedError, match=f"held by process {os.getpid()}@"):
        FolderLock(tmp_path / "run.lock").acquire()
    first.release()
    assert not (tmp_path / "run.lock").exists()
    (tmp_path / "run.lock").write_text("not json")
    with pytest.raises(LockedError, match="is not a lock file written by routing-rl"):
        FolderLock(tmp_path / "run.lock").acquire()


@pytest.mark.slow
def test_two_starts_of_one_run_name_at_once_leave_one_run(tiny_data, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, str(REPO / "experiments" / "train_agent.py"),
               *args(tiny_data, tmp_path, "run", "--iterations", "40", "--checkpoint-every", "10")]
    processes = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
    results = [(p.wait(timeout=600), p.stderr.read()) for p in processes]
    assert sorted(code for code, _ in results) == [0, 2], results
    refusal = next(err for code, err in results if code == 2).strip()
    assert len(refusal.splitlines()) == 1 and ("in use by process" in refusal or "already exists" in refusal), refusal
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["history"][-1]["iteration"] == 40 and not (tmp_path / "run" / LOCK).exists()


# --- seeds and SB3 keyword arguments at config time ----------------------------------------


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1, 10**400])
def test_seeds_beyond_63_bits_are_refused(seed):
    with pytest.raises(ValueError, match=r"seed must be an integer in 0 \.\.\. 2\*\*63 - 1"):
        make_config("smoke", seed=seed)
    assert make_config("smoke", seed=2**63 - 1).seed == 2**63 - 1


def test_the_sweep_checks_seeds_too():
    from routing_rl.app.sweep import sweep_configs

    with pytest.raises(ValueError, match="seed must be an integer in 0"):
        sweep_configs(["actor"], ["4e-9"], seeds=[2**63], preset="smoke")


def test_sb3_seeds_fit_numpys_32_bits():
    with pytest.raises(ValueError, match="seed must be at most 4294967294 for dqn"):
        make_config("smoke", agent="dqn", seed=2**32 - 1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"buffer_size": "x"}, "buffer_size must be an integer, got 'x'"),
        ({"learning_rate": -1}, "learning_rate must be a finite number > 0, got -1"),
        ({"learning_rate": 1e308}, "learning_rate must be at most 3.4e+38"),
        ({"policy_kwargs": "x"}, "policy_kwargs must be a JSON object or null, got 'x'"),
        ({"device": "cuda"}, "set the device with --device"),
        ({"seed": 3}, "set the seed with --seed"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"batch_size": True}, "batch_size must be an integer, got True"),
        ({"gamma": float("nan")}, "gamma must be in [0, 1], got nan"),
        ({"gradient_steps": 0}, "gradient_steps must be a positive integer, or -1"),
    ],
)
def test_sb3_kwargs_are_typed_and_ranged_in_the_config(kwargs, message):
    with pytest.raises(ValueError) as error:
        make_config("smoke", agent="dqn", sb3_kwargs=kwargs)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("agent, kwargs, message", [
    ("dqn", {"policy_kwargs": {"foo": 1}}, "unexpected keyword argument 'foo'"),
    ("dqn", {"train_freq": [1, "x"]}, "train_freq"),
    ("ppo", {"policy_kwargs": {"activation_fn": "relu"}}, "SB3's PPO refuses them"),
])
def test_what_sb3_checks_itself_is_refused_before_the_run_starts(agent, kwargs, message, tmp_path):
    from routing_rl.agents.sb3 import check_sb3_kwargs

    config = make_config("smoke", agent=agent, sb3_kwargs=kwargs, logdir=str(tmp_path))
    with pytest.raises(ValueError, match=message) as error:
        check_sb3_kwargs(config)
    assert "\n" not in str(error.value)
    check_sb3_kwargs(make_config("smoke", agent=agent, sb3_kwargs={"n_steps": 4} if agent != "dqn" else {"buffer_size": 64}))


# --- one line instead of a traceback --------------------------------------------------------


def test_lr_beyond_float32_is_refused(tiny_data, tmp_path, capsys):
    assert "lr must be at most 3.4e+38 (the weights are float32)" in refused(args(tiny_data, tmp_path, "run", "--lr", "1e308"), capsys)
    assert not (tmp_path / "run").exists()


def test_a_run_name_longer_than_a_file_name_is_refused(tiny_data, tmp_path, capsys):
    err = refused(args(tiny_data, tmp_path, "x" * 300), capsys)
    assert "run_name must be at most 255 bytes" in err
    with pytest.raises(ValueError, match="at most 255 bytes"):
        TrainConfig(run_name="é" * 128).validate()


def test_a_damaged_metrics_file_on_resume_is_one_line(finished, capsys):
    (finished / "metrics.json").write_text('{"run": ')
    err = refused(["--resume", str(finished)], capsys)
    assert f"{finished / 'metrics.json'} is damaged" in err and "restore the file" in err


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EIO, "I/O error")])
def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(failure, tiny_data, tmp_path, capsys, monkeypatch):
    from routing_rl.training import checkpoint

    written = []
    original = checkpoint.atomic_write

    def fail_second(path, write):
        if written:
            class Full:  # the file the checkpoint is written to, full after a few bytes
                def write(self, data):
                    raise failure

                def flush(self):
                    pass

            return original(path, lambda stream: write(Full()))
        written.append(path)
        return original(path, write)

    monkeypatch.setattr(checkpoint, "atomic_write", fail_second)
    err = refused(args(tiny_data, tmp_path, "run"), capsys)
    reason = "no space left on device writing" if failure.errno == errno.ENOSPC else "cannot write (I/O error)"
    assert f"{reason} checkpoint 4 to {tmp_path / 'run' / 'checkpoint.pt'}; the previous checkpoint is kept" in err
    state = checkpoint.load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["training_state"]["iteration"] == 2
    assert sorted(p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")) == []


def test_refusing_an_existing_run_suggests_resume_only_when_unfinished(finished, tiny_data, capsys):
    err = refused(args(tiny_data, finished.parent, "run"), capsys)
    assert "holds a finished run; pass --overwrite" in err and "--resume" not in err
    (finished / "metrics.json").unlink()
    err = refused(args(tiny_data, finished.parent, "run"), capsys)
    assert f"holds an unfinished run; pass --resume {finished} to continue it" in err


def test_an_sb3_run_with_only_checkpoints_is_unfinished_not_replaced(finished_dqn, tiny_data, capsys):  # noqa: F811
    for name in ("metrics.json", "model.zip"):
        (finished_dqn / name).unlink()
    before = snapshot(finished_dqn)
    assert "holds an unfinished run" in refused(args(tiny_data, finished_dqn.parent, "run", *SB3, agent="dqn"), capsys)
    assert snapshot(finished_dqn) == before


# --- issue 48: a run folder that is a link, a user's file named like a temporary, locks that are not locks


@pytest.mark.parametrize("how", ["--overwrite", "start", "--resume"])
def test_a_run_folder_that_is_a_symlink_is_never_written_through(how, finished, tiny_data, capsys):
    (finished / "metrics.json").unlink()  # resumable: a resume through the link would write
    link = finished.parent / "o"
    link.symlink_to(finished, target_is_directory=True)
    before = snapshot(finished)
    argv = (["--resume", str(link)] if how == "--resume"
            else args(tiny_data, finished.parent, "o", *([how] if how == "--overwrite" else [])))
    err = refused(argv, capsys)
    assert f"{link} is a symbolic link (to {finished})" in err and "writes nothing through links" in err
    assert snapshot(finished) == before and link.is_symlink()


def test_a_users_file_named_like_a_temporary_survives_overwrite(finished, tiny_data, capsys):
    mine = finished / ".notes.abcdefgh.tmp"
    mine.write_text("the user's")
    assert main(args(tiny_data, finished.parent, "run", "--overwrite", "--seed", "1")) == 0
    assert mine.read_text() == "the user's"


@pytest.mark.parametrize("kind", ["a FIFO", "a folder"])
def test_a_run_lock_that_is_not_a_file_is_refused_without_hanging(kind, finished, tiny_data, capsys):
    from test_safety_units import deadline

    (finished / "metrics.json").unlink()
    lock = finished / LOCK
    os.mkfifo(lock) if kind == "a FIFO" else lock.mkdir()
    before = snapshot(finished)
    for argv in (args(tiny_data, finished.parent, "run"), args(tiny_data, finished.parent, "run", "--overwrite"),
                 ["--resume", str(finished)]):
        with deadline(120):  # the read of a FIFO blocks until someone writes into it
            err = refused(argv, capsys)
        assert f"{lock} is {kind}, not a lock file written by routing-rl" in err
    assert snapshot(finished) == before and (lock.is_fifo() if kind == "a FIFO" else lock.is_dir())


@pytest.mark.parametrize("fields", ['"pid": 1180591620717411303424, "started": 0', '"pid": PPID, "started": 1e400',
                                    '"pid": PPID, "started": NaN', '"pid": PPID, "started": 1e17'],
                         ids=["pid 2**70", "started 1e400", "started NaN", "started 1e17"])
def test_a_lock_with_impossible_fields_is_one_line_and_kept(fields, finished, tiny_data, capsys):
    (finished / "metrics.json").unlink()
    text = f'{{{fields.replace("PPID", str(os.getppid()))}, "host": "{socket.gethostname()}"}}\n'
    (finished / LOCK).write_text(text)
    before = snapshot(finished)
    for argv in (["--resume", str(finished)], args(tiny_data, finished.parent, "run", "--overwrite")):
        assert "is not a lock file written by routing-rl" in refused(argv, capsys)
    assert snapshot(finished) == before
