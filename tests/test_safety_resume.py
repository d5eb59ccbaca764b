"""Issue 25: Ctrl-C and SIGTERM stop a run between two steps and ``--resume`` gives the run no
signal would have given, bit for bit; interrupts anywhere (a second Ctrl-C, the imports) end
with one line; a checkpoint of another agent, arch or task is refused (tiny synthetic data)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from routing_rl.app.cli import main
from routing_rl.training.interrupt import request_stop

REPO = Path(__file__).resolve().parents[1]
SCRIPT = str(REPO / "experiments" / "train_agent.py")
LEARNERS = [("actor", []), ("pragmatic-critic", ["--policy", "eps-greedy", "--execution", "sampled"])]  # it samples its routes


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "resume-cache"))


def args(tiny_data, logdir, name, agent, *extra, iterations=12):
    return ["--agent", agent, "--preset", "smoke", "--iterations", str(iterations), "--eval-every", "4",
            "--checkpoint-every", "5", "--data-dir", str(tiny_data), "--download", "false",
            "--validation-fraction", "0.4", "--logdir", str(logdir), "--run-name", name, *extra]


def tensors(value, prefix="") -> dict[str, torch.Tensor]:
    """Every tensor in a nested checkpoint, by its path."""
    if isinstance(value, torch.Tensor):
        return {prefix: value}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return {name: t for key, item in items for name, t in tensors(item, f"{prefix}/{key}").items()}


def assert_same_run(straight: Path, resumed: Path, where: str) -> None:
    """Every tensor of the final learner state, and the test results, bit for bit."""
    a, b = (tensors(torch.load(run / "checkpoint.pt", weights_only=True)["learner"]) for run in (straight, resumed))
    assert a.keys() == b.keys()
    differ = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ after a stop {where}: {differ[:5]}"
    metrics = [json.loads((run / "metrics.json").read_text()) for run in (straight, resumed)]
    assert metrics[0]["test"] == metrics[1]["test"] and metrics[0]["history"] == metrics[1]["history"]


def one_line(err: str) -> str:
    """The last line of stderr (progress bars come before it); asserts no traceback."""
    assert "Traceback" not in err and "Error" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("agent, extra", LEARNERS)
def test_a_signal_mid_step_checkpoints_the_step_and_resumes_bit_for_bit(agent, extra, tiny_data, tmp_path, capsys,
                                                                         monkeypatch):
    from routing_rl.agents.registry import make_learner

    iteration = random.choice([i for i in range(1, 11) if i % 5])  # anywhere between two checkpoints
    assert main(args(tiny_data, tmp_path, "straight", agent, *extra)) == 0

    def signalled(*a, **k):
        learner = make_learner(*a, **k)
        step = learner.train_step

        def train_step(batch, at):
            if at == iteration:
                request_stop(signal.SIGTERM)  # the signal lands inside the step
            return step(batch, at)

        learner.train_step = train_step
        return learner

    monkeypatch.setattr("routing_rl.agents.registry.make_learner", signalled)
    assert main(args(tiny_data, tmp_path, "stopped", agent, *extra)) == 143
    assert one_line(capsys.readouterr().err) == (f"train_agent.py: interrupted (SIGTERM) after iteration {iteration + 1}, "
                                                 "which is checkpointed; continue with --resume")
    saved = torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=True)
    assert saved["training_state"]["iteration"] == iteration + 1
    monkeypatch.undo()
    assert main(["--resume", str(tmp_path / "stopped")]) == 0
    assert_same_run(tmp_path / "straight", tmp_path / "stopped", f"in iteration {iteration}")


@pytest.fixture(params=["default", "ignored"])
def entry_handlers(request):
    """The SIGINT disposition the run starts under: Python's own, or ignored as a shell leaves it for
    a background job (``pytest &``, nohup, many CI shells); given back as found after the test."""
    found = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    if request.param == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    yield {signum: signal.getsignal(signum) for signum in found}
    for signum, handler in found.items():
        signal.signal(signum, handler)


def test_real_sigterm_then_sigint_while_checkpointing_is_one_line_and_a_whole_checkpoint(tiny_data, tmp_path, capsys,
                                                                                         monkeypatch, entry_handlers):
    """Signals sent to this very process: SIGTERM inside step 2, SIGINT while the checkpoint is written."""
    from routing_rl.agents.actor import ActorLearner
    from routing_rl.app import runs

    step, save = ActorLearner.train_step, runs.save_checkpoint

    def signalled_step(self, batch, iteration):
        if iteration == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, batch, iteration)

    def signalled_save(path, state):
        if state["training_state"]["iteration"] == 3:
            os.kill(os.getpid(), signal.SIGINT)
        save(path, state)

    monkeypatch.setattr(ActorLearner, "train_step", signalled_step)
    monkeypatch.setattr(runs, "save_checkpoint", signalled_save)
    assert main(args(tiny_data, tmp_path, "run", "actor")) == 143
    assert one_line(capsys.readouterr().err) == ("train_agent.py: interrupted (SIGTERM) after iteration 3, which is "
                                                 "checkpointed; continue with --resume")
    assert torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["training_state"]["iteration"] == 3
    assert [p.name for p in (tmp_path / "run").glob(".*.tmp")] == []
    after = {signum: signal.getsignal(signum) for signum in entry_handlers}
    assert after == entry_handlers, "the handlers found are given back"


def test_a_signal_handled_outside_python_is_left_alone(entry_handlers, monkeypatch):
    """Python reports a handler installed by C code as None and cannot put it back: such a
    signal is neither taken over nor "restored" (signal.signal(SIGTERM, None) is a TypeError)."""
    from routing_rl.training.interrupt import _on_signal, handling_signals

    reported = signal.getsignal
    monkeypatch.setattr(signal, "getsignal", lambda signum: None if signum == signal.SIGTERM else reported(signum))
    with handling_signals():
        assert reported(signal.SIGINT) is _on_signal and reported(signal.SIGTERM) is entry_handlers[signal.SIGTERM]
    assert {signum: reported(signum) for signum in entry_handlers} == entry_handlers


def test_a_signal_that_c_code_turns_into_another_error_is_still_one_line(tiny_data, tmp_path, capsys, monkeypatch):
    def interrupted_in_c():
        try:
            os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt:  # the handler's Interrupted, as an extension re-raises it
            raise SystemError("<built-in function decode> returned a result with an exception set") from None
        raise AssertionError("the signal was not handled")

    monkeypatch.setattr("routing_rl.core.memory.retain_freed_memory", interrupted_in_c)
    assert main(args(tiny_data, tmp_path, "run", "actor")) == 130
    assert one_line(capsys.readouterr().err) == ("train_agent.py: interrupted (SIGINT); every checkpoint written is kept: "
                                                 "continue a started run with --resume")


def test_ctrl_c_anywhere_else_is_one_line(tiny_data, tmp_path, capsys, monkeypatch):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr("routing_rl.core.memory.retain_freed_memory", interrupted)
    assert main(args(tiny_data, tmp_path, "run", "actor")) == 130
    assert one_line(capsys.readouterr().err) == ("train_agent.py: interrupted; every checkpoint written is kept: "
                                                 "continue a started run with --resume")


# --- real signals to a real process ----------------------------------------------------------


def start(command, env):
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(path: Path, process, timeout=300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before the signal"


@pytest.mark.slow
@pytest.mark.parametrize("signals, code", [((signal.SIGTERM,), 143), ((signal.SIGINT, signal.SIGINT), 130)])
@pytest.mark.parametrize("agent, extra", LEARNERS)
def test_real_signals_between_checkpoints_resume_bit_for_bit(agent, extra, signals, code, tiny_data, tmp_path):
    """SIGTERM, or two SIGINTs 20 ms apart, somewhere after the first checkpoint."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    def command(name):
        return [sys.executable, SCRIPT, *args(tiny_data, tmp_path, name, agent, *extra, iterations=60)]

    subprocess.run(command("straight"), check=True, capture_output=True, timeout=600, env=env)
    process = start(command("stopped"), env)
    wait_for(tmp_path / "stopped" / "checkpoint.pt", process)
    time.sleep(random.uniform(0, 0.05))
    for signum in signals:
        process.send_signal(signum)
        time.sleep(0.02)
    _, err = process.communicate(timeout=300)
    assert process.returncode == code, err
    assert one_line(err).startswith(f"train_agent.py: interrupted ({signal.Signals(signals[0]).name}) after iteration")
    stopped_at = torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=True)["training_state"]["iteration"]
    subprocess.run([sys.executable, SCRIPT, "--resume", str(tmp_path / "stopped")], check=True, capture_output=True,
                   timeout=600, env=env)
    assert_same_run(tmp_path / "straight", tmp_path / "stopped", f"after iteration {stopped_at}")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps to see torch being imported")
@pytest.mark.parametrize("delay", [0.0, 0.2, 0.5])
def test_ctrl_c_while_importing_is_one_line(delay, tiny_data, tmp_path):
    """SIGINT once torch's library is mapped, i.e. while train_agent.py's imports run (or, the
    imports done by then, while the run starts)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = start([sys.executable, SCRIPT, *args(tiny_data, tmp_path, "run", "actor", iterations=60)], env)
    maps = Path(f"/proc/{process.pid}/maps")
    deadline = time.monotonic() + 120
    while process.poll() is None and "libtorch" not in maps.read_text() and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    assert "interrupted" in one_line(err)
    assert not (tmp_path / "run" / "metrics.json").exists()


# --- checkpoints carry their run ---------------------------------------------------------------


def interrupted_run(tiny_data, logdir, name, agent, *extra) -> Path:
    """A run stopped by Ctrl-C after its first step."""
    from routing_rl.app import trainer

    original = trainer.agreed_stop
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "agreed_stop", lambda distributed: request_stop() or original(distributed))
        assert main(args(tiny_data, logdir, name, agent, *extra)) == 130
    return logdir / name


def refused_resume(target, capsys) -> str:
    """``--resume target`` refused with exit 2: its one line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["--resume", str(target)])
    assert stop.value.code == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize("other, extra, message", [
    ("pragmatic-critic", [], "was written by another run (agent pragmatic-critic, arch chain, width 1, "
                             "env routing_rl/HybridRouting-v0)"),
    pytest.param("actor", ["--arch", "tree"], "(agent actor, arch tree, width 1", marks=pytest.mark.slow),
    pytest.param("actor", ["--dataset", "mnist"], "env routing_rl/HybridRouting-v0, dataset mnist)",
                 marks=pytest.mark.slow),
])
def test_a_checkpoint_of_another_run_is_refused(other, extra, message, tiny_data, tmp_path, capsys):
    target = interrupted_run(tiny_data, tmp_path, "actor", "actor")
    source = interrupted_run(tiny_data, tmp_path, "other", other, *extra)
    before = (target / "checkpoint.pt").read_bytes()
    shutil.copy(source / "checkpoint.pt", target / "checkpoint.pt")
    err = refused_resume(target, capsys)
    assert len(err.splitlines()) == 1 and message in err, err
    assert "not by this one (agent actor, arch chain, width 1, env routing_rl/HybridRouting-v0)" in err
    assert not (target / "metrics.json").exists()
    (target / "checkpoint.pt").write_bytes(before)
    assert main(["--resume", str(target)]) == 0


@pytest.mark.slow
def test_an_old_checkpoint_is_checked_by_its_tensors(tiny_data, tmp_path, capsys):
    """Checkpoints from before they named their run: the same net resumes, another is one line."""
    target = interrupted_run(tiny_data, tmp_path, "actor", "actor")
    tree = interrupted_run(tiny_data, tmp_path, "tree", "actor", "--arch", "tree")
    for run in (target, tree):
        state = torch.load(run / "checkpoint.pt", weights_only=True)
        del state["identity"]
        torch.save(state, run / "checkpoint.pt")
    before = (target / "checkpoint.pt").read_bytes()
    shutil.copy(tree / "checkpoint.pt", target / "checkpoint.pt")
    err = refused_resume(target, capsys)
    assert len(err.splitlines()) == 1 and "holds another net than this run's" in err, err
    (target / "checkpoint.pt").write_bytes(before)
    assert main(["--resume", str(target)]) == 0


# --- SB3 agents ----------------------------------------------------------------------------------


def test_an_sb3_checkpoint_of_another_run_is_refused(tmp_path):
    import zipfile

    from routing_rl.agents.sb3 import SB3LoadError, load_newest

    routing = {"agent": "dqn", "env": "routing_rl/HybridRouting-v0", "dataset": None, "arch": "chain", "width": 1,
               "sb3": {}, "n_envs": 8, "joint": {}}
    (tmp_path / "checkpoints").mkdir()
    with zipfile.ZipFile(tmp_path / "checkpoints" / "ppo_8_iterations.zip", "w") as archive:
        archive.writestr("data", json.dumps({"routing": {**routing, "agent": "ppo", "arch": "tree"}}))
    with pytest.raises(SB3LoadError, match=r"ppo_8_iterations.zip was written by another run \(agent ppo, "
                                           r"env routing_rl/HybridRouting-v0, arch tree, width 1\), not by this one "
                                           r"\(agent dqn, env routing_rl/HybridRouting-v0, arch chain, width 1\)"):
        load_newest(tmp_path, None, torch.device("cpu"), routing)
