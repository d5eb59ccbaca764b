"""Issue 13 through experiments/train_agent.py and the sweep: every refusal is one line with
exit status 2, nothing is deleted by mistake, planted pickles never run, NaN stops a run,
and failed or finished runs leave nothing to trip over (tiny synthetic data)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.app import runs
from routing_rl.app.cli import main
from routing_rl.core.files import TEMPORARY_SUFFIX
from routing_rl.training.checkpoint import CheckpointError
from routing_rl.training.config import TrainConfig

from helpers import flat_config
from routing_rl.app.sweep import config_differences, run_sweep, select_static_lr, sweep_configs

REPO = Path(__file__).resolve().parents[1]


class Planted:
    """A pickle that, if ever unpickled, leaves a marker file: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "safety-cache"))


def args(tiny_data, logdir, name="run", *extra, agent="static"):
    arch = ["--arch", "static-1"] if agent == "static" else []
    return ["--agent", agent, *arch, "--preset", "smoke", "--iterations", "4", "--eval-every", "2",
            "--checkpoint-every", "2", "--data-dir", str(tiny_data), "--download", "false",
            "--validation-fraction", "0.4", "--logdir", str(logdir), "--run-name", name, *extra]


def refused(argv, capsys) -> str:
    """The one line a refused command prints (beside the progress records of a run that
    trained before it stopped); asserts exit status 2 and no traceback."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = "\n".join(line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("progress "))
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_logdir(tiny_data, tmp_path_factory):
    logdir = tmp_path_factory.mktemp("finished")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "safety-cache"))
        for name in ("run", "other"):
            assert main(args(tiny_data, logdir, name)) == 0
    (logdir / "notes.txt").write_text("mine")
    return logdir


@pytest.fixture
def finished(finished_logdir, tmp_path, capsys):
    """A complete run ``logdir/run`` beside another run and a user's file (a fresh copy)."""
    logdir = tmp_path / "logdir"
    shutil.copytree(finished_logdir, logdir)
    for name in ("run", "other"):  # the copies' configs name their new logdir
        config = json.loads((logdir / name / "config.json").read_text())
        (logdir / name / "config.json").write_text(json.dumps({**config, "logdir": str(logdir)}, indent=2, sort_keys=True))
    capsys.readouterr()
    return logdir / "run"


# --- refusals: one line, exit status 2 -----------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--k-cpt", "1e30"], "k_cpt must be at most 1 per MAC"),
        (["--lr", "inf"], "lr must be a finite number > 0, got inf"),
        (["--agent", "actor", "--arch", "chain", "--k-dec", "nan"], "k_dec must be a finite number >= 0, got nan"),
        (["--momentum", "-1"], r"momentum must be in [0, 1), got -1"),
        (["--agent", "actor", "--arch", "chain", "--tau", "0"], "tau must be a finite number > 0, got 0"),
        (["--probability-floor", "2"], "probability_floor must be in (0, 1)"),
        (["--width", "10000"], "out of memory: --arch static-1 --width 10000"),
        (["--batch-size", "100000000"], "lower --batch-size to at most"),
        (["--dataset", "nonsense"], "unknown dataset 'nonsense'"),
        (["--device", "cpu", "--cuda-graphs", "true"], "needs a CUDA device; this run trains on cpu: drop --cuda-graphs"),
        (["--device", "cuda:7"] if not torch.cuda.is_available() else ["--device", "nonsense"], "device"),
    ],
)
def test_bad_values_are_refused_and_leave_no_folder(extra, message, tiny_data, tmp_path, capsys):
    err = refused(args(tiny_data, tmp_path, "run", *extra), capsys)
    assert message in err
    assert not (tmp_path / "run").exists(), "a failed start leaves nothing behind"


@pytest.mark.parametrize("name", [".", "..", "/tmp/routing-rl-absolute", "sub/run", ""])
def test_run_names_are_one_folder_name_and_overwrite_deletes_nothing_else(name, finished, tiny_data, capsys):
    logdir = finished.parent
    before = snapshot(logdir)
    err = refused(args(tiny_data, logdir, name, "--overwrite"), capsys)
    assert "run_name must be one folder name" in err
    assert snapshot(logdir) == before
    assert not Path("/tmp/routing-rl-absolute").exists()


@pytest.mark.parametrize("typo", [["--dataset", "hybird"], ["--device", "cuda:7" if not torch.cuda.is_available() else "nonsense"],
                                  ["--lr", "inf"], ["--width", "10000"]])
def test_overwrite_with_a_typo_keeps_the_old_run(typo, finished, tiny_data, capsys):
    before = snapshot(finished)
    refused(args(tiny_data, finished.parent, "run", "--overwrite", *typo), capsys)
    assert snapshot(finished) == before


def test_overwrite_removes_only_what_runs_write(finished, tiny_data, capsys):
    (finished / "analysis.ipynb").write_text("the user's")
    old_events = set(finished.glob("events.out.tfevents.*"))
    assert main(args(tiny_data, finished.parent, "run", "--overwrite", "--seed", "3")) == 0
    assert (finished / "analysis.ipynb").read_text() == "the user's"
    assert json.loads((finished / "config.json").read_text())["seed"] == 3
    events = set(finished.glob("events.out.tfevents.*"))
    assert old_events and events and not old_events & events, "the old run's event files are gone"
    assert (finished.parent / "notes.txt").is_file() and (finished.parent / "other" / "metrics.json").is_file()


def test_a_folder_that_is_not_a_run_is_never_touched(tiny_data, tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "thesis.tex").write_text("precious")
    err = refused(args(tiny_data, tmp_path, "run", "--overwrite"), capsys)
    assert "is not a run directory (no config.json); routing-rl will not touch it" in err
    assert (tmp_path / "run" / "thesis.tex").read_text() == "precious"


def test_a_logdir_that_is_a_file_or_under_one_is_refused(tiny_data, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert "is a file, not a folder" in refused(args(tiny_data, tmp_path / "file"), capsys)
    assert "is a file, not a folder" in refused(args(tiny_data, tmp_path / "file" / "below" / "runs"), capsys)


def test_an_unwritable_logdir_is_refused(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runs.os, "access", lambda path, mode: False)  # tests may run as root
    assert "is not writable" in refused(args(tiny_data, tmp_path / "new" / "runs"), capsys)


def test_a_missing_parent_logdir_is_created(tiny_data, tmp_path, capsys):
    assert main(args(tiny_data, tmp_path / "a" / "b" / "runs")) == 0
    assert (tmp_path / "a" / "b" / "runs" / "run" / "metrics.json").is_file()


# --- failed starts, stray files, finished runs ---------------------------------------------


def test_a_failed_start_can_be_rerun_under_the_same_name(tiny_data, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(runs.TrainConfig().to_json())  # what a crashed start leaves
    assert main(args(tiny_data, tmp_path, "run")) == 0
    assert (run_dir / "metrics.json").is_file()


def test_resume_removes_stray_temporaries(tiny_data, tmp_path, capsys, monkeypatch):
    from routing_rl.agents.static import StaticLearner

    original = StaticLearner.train_step

    def interrupted(self, batch, iteration):
        if iteration == 3:
            raise KeyboardInterrupt
        return original(self, batch, iteration)

    monkeypatch.setattr(StaticLearner, "train_step", interrupted)
    assert main(args(tiny_data, tmp_path)) == 130
    stray = tmp_path / "run" / f".checkpoint.pt.k1ll3d_x{TEMPORARY_SUFFIX}"
    stray.write_bytes(b"cut short")
    mine = tmp_path / "run" / ".notes.abcdefgh.tmp"  # a user's, named like a temporary file
    mine.write_text("the user's")
    monkeypatch.setattr(StaticLearner, "train_step", original)
    assert main(["--resume", str(tmp_path / "run")]) == 0
    assert not stray.exists() and mine.read_text() == "the user's"


def test_resuming_a_finished_run_changes_nothing(finished, capsys):
    before = snapshot(finished)
    assert main(["--resume", str(finished)]) == 0
    assert "is complete already" in capsys.readouterr().err
    assert snapshot(finished) == before


def test_a_resumed_run_logs_no_step_twice(tiny_data, tmp_path, capsys, monkeypatch):
    """A process killed after logging past its last checkpoint: TensorBoard keeps each step once."""
    from routing_rl.agents.static import StaticLearner

    original = StaticLearner.train_step

    def killed(self, batch, iteration):
        if iteration == 3:
            raise SystemExit("killed")  # no Ctrl-C checkpoint: as after SIGKILL
        return original(self, batch, iteration)

    monkeypatch.setattr(StaticLearner, "train_step", killed)
    with pytest.raises(SystemExit):
        main(args(tiny_data, tmp_path, "run", "--eval-every", "1"))  # validated at 1, 2, 3; checkpoint at 2
    monkeypatch.setattr(StaticLearner, "train_step", original)
    # TensorBoard reads event files in name order: the second they were opened, then a counter of
    # this process's writers compared as text ("10" before "9"). A resumed run opens its file in a
    # later process and a later second; here, the same process: the second must differ.
    time.sleep(1.1)
    assert main(["--resume", str(tmp_path / "run")]) == 0
    accumulator = EventAccumulator(str(tmp_path / "run"))
    accumulator.Reload()
    assert [event.step for event in accumulator.Scalars("charts/val_accuracy")] == [1, 2, 3, 4]


# --- loading what is in a run folder -------------------------------------------------------


def test_a_planted_checkpoint_never_runs_on_resume_or_in_a_sweep(tiny_data, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    configs = sweep_configs([], [], static_columns=[1], preset="smoke", iterations=4, eval_every=2, checkpoint_every=2,
                            data_dir=str(tiny_data), download=False, validation_fraction=0.4, logdir=str(tmp_path))
    run_dir = tmp_path / configs[0].run_name
    run_dir.mkdir()
    configs[0].save(run_dir / "config.json")
    torch.save({"learner": Planted(marker)}, run_dir / "checkpoint.pt")
    assert "refusing to load" in refused(["--resume", str(run_dir)], capsys)
    with pytest.raises(runs.RunError, match=r"refusing to load .*checkpoint\.pt"):
        run_sweep(configs, log=lambda line: None)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_checkpoint_is_refused_on_resume(damage, finished, capsys):
    (finished / "metrics.json").unlink()
    data = (finished / "checkpoint.pt").read_bytes()
    (finished / "checkpoint.pt").write_bytes(data[:100] if damage == "truncated" else b"")
    err = refused(["--resume", str(finished)], capsys)
    assert "checkpoint.pt: it is empty, truncated or not a checkpoint" in err


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text[: len(text) // 2], "is not a valid run config"),
        (lambda text: text.replace('"lr": null', '"lr": "fast"'), "lr must be a number or null, got 'fast'"),
        (lambda text: text.replace('"momentum": 0.9', '"momentum": -1'), "momentum must be in [0, 1)"),
        (lambda text: text.replace('"run_name": "run"', '"run_name": ".."'), "run_name must be one folder name"),
        (lambda text: "[1, 2]", "it holds a JSON list"),
    ],
)
def test_a_broken_or_hand_edited_config_is_refused_on_resume(edit, message, finished, capsys):
    (finished / "metrics.json").unlink()
    path = finished / "config.json"
    path.write_text(edit(path.read_text()))
    err = refused(["--resume", str(finished)], capsys)
    assert f"{path} is not a valid run config" in err and message in err


# --- NaN ---------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", ["static", "actor", "critic", "threshold"])
def test_a_diverging_run_stops_with_the_nan_guard(agent, tiny_data, tmp_path, capsys):
    extra = ["--arch", "static-2"] if agent == "static" else []
    err = refused(args(tiny_data, tmp_path, "run", "--lr", "1e6", "--iterations", "30", *extra, agent=agent), capsys)
    assert "so training stopped" in err and "lower --lr" in err and " at iteration " in err
    assert not (tmp_path / "run" / "metrics.json").exists()
    if (tmp_path / "run" / "checkpoint.pt").exists():  # the last good one: finite weights
        state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
        assert all(v.isfinite().all() for v in state["learner"]["net"].values() if v.is_floating_point())


def test_running_out_of_memory_mid_run_is_one_line(tiny_data, tmp_path, capsys, monkeypatch):
    from routing_rl.agents.static import StaticLearner

    def allocate(self, batch, iteration):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] . DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 1228800000000 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(StaticLearner, "train_step", allocate)
    err = refused(args(tiny_data, tmp_path), capsys)
    assert "out of memory while training" in err and "lower --batch-size (now 16) or --width (now 1)" in err


# --- sweeps ------------------------------------------------------------------------------


def sweep(tiny_data, logdir, **overrides):
    values = dict(iterations=2, eval_every=1, checkpoint_every=1, data_dir=str(tiny_data), download=False,
                  validation_fraction=0.4, logdir=str(logdir))
    return sweep_configs([], [], static_columns=[1], preset="smoke", **{**values, **overrides})


def test_a_sweep_skips_only_runs_made_with_the_same_settings(tiny_data, tmp_path):
    run_sweep(sweep(tiny_data, tmp_path, dataset="mnist"), log=lambda line: None)
    with pytest.raises(runs.RunError, match=r"holds a run with other settings than asked \(dataset 'mnist' \(saved\) vs None"):
        run_sweep(sweep(tiny_data, tmp_path), log=lambda line: None)
    log = []
    run_sweep(sweep(tiny_data, tmp_path, dataset="mnist", device="cpu"), log=log.append)  # machine settings may differ
    assert "complete, skipped" in log[0]


def test_a_default_lr_saved_as_its_value_is_the_same_run():
    """Configs saved before lr's default became None hold 0.1 (0.02 for the SB3 agents' is new):
    a sweep still skips or resumes them; another lr is still another run."""
    assert config_differences(TrainConfig(agent="actor", lr=0.1), TrainConfig(agent="actor")) == []
    assert config_differences(TrainConfig(agent="dqn", lr=0.02), TrainConfig(agent="dqn")) == []
    assert config_differences(TrainConfig(agent="dqn", lr=0.1), TrainConfig(agent="dqn")) == ["lr 0.1 (saved) vs 0.02 (asked)"]


def test_a_critic_saved_under_an_earlier_default_is_another_run_and_its_own_values_the_same_run():
    """Saved configs name the utility's error and the routers' rate (their defaults became None
    on 2026-11-28): a critic saved under the earlier default is refused by name, one that
    spelled out today's values is the same run."""
    earlier = TrainConfig(agent="pragmatic-critic", learner_options=dict(utility_error="cross_entropy", router_lr_scale=1.0))
    assert config_differences(earlier, TrainConfig(agent="pragmatic-critic")) == [
        "router_lr_scale 1.0 (saved) vs 100.0 (asked)", "utility_error 'cross_entropy' (saved) vs 'zero_one' (asked)"]
    spelled = TrainConfig(agent="pragmatic-critic", lr=0.02,
                          learner_options=dict(utility_error="zero_one", router_lr_scale=100.0, head_weight=1.0))
    assert config_differences(spelled, TrainConfig(agent="pragmatic-critic")) == []
    assert config_differences(earlier, TrainConfig(agent="pragmatic-critic", learner_options=dict(head_weight=0.0))) == [
        "lr 0.02 (saved) vs 0.1 (asked)", "head_weight 1.0 (saved) vs 0.0 (asked)"]


def test_dqn_saved_before_double_q_keeps_its_one_step_targets_and_is_another_run():
    """double_q became DQN's default on 2026-11-28: a DQN config written before it has no such
    key and trained on one-step max targets, so it reads back as False and a sweep under the
    new default refuses it by name; the other agents never read it."""
    old = flat_config(TrainConfig(agent="dqn"))
    del old["double_q"]
    earlier = TrainConfig.from_json(json.dumps(old))
    assert not earlier.options.double_q and TrainConfig(agent="dqn").options.double_q
    assert config_differences(earlier, TrainConfig(agent="dqn")) == ["double_q False (saved) vs True (asked)"]
    assert not hasattr(TrainConfig(agent="ppo").options, "double_q")
    old_actor = flat_config(TrainConfig(agent="actor"))
    del old_actor["double_q"]
    assert config_differences(TrainConfig.from_json(json.dumps(old_actor)), TrainConfig(agent="actor")) == []


def test_the_joint_training_weight_tells_runs_apart_only_for_the_agents_that_read_it():
    """uniform_weight's default moved from 0.25 to 1.0 with the task suite; only the SB3
    agents' env reads it, so the paper's learners saved under 0.25 (when every config named it)
    are the same runs."""
    saved = TrainConfig.from_json(json.dumps({**flat_config(TrainConfig(agent="actor")), "uniform_weight": 0.25}))
    assert config_differences(saved, TrainConfig(agent="actor")) == []
    saved = TrainConfig(agent="dqn", learner_options=dict(uniform_weight=0.25))
    assert config_differences(saved, TrainConfig(agent="dqn")) == [
        "uniform_weight 0.25 (saved) vs 1.0 (asked)"]


def test_static_lr_selection_is_on_validation_deterministic_and_resumable(tiny_data, tmp_path):
    machine = dict(data_dir=str(tiny_data), download=False, validation_fraction=0.4, logdir=str(tmp_path))
    candidates = (0.1, 0.05, 0.02)
    chosen = select_static_lr(candidates, trial_iterations=2, columns=1, preset="smoke", log=lambda line: None, **machine)
    accuracy = {lr: json.loads((tmp_path / f"lrsel-static-1-lr{lr:g}" / "metrics.json").read_text())
                ["history"][-1]["evaluations"][0]["accuracy"] for lr in candidates}
    assert chosen == next(lr for lr in candidates if accuracy[lr] == max(accuracy.values()))
    log = []
    assert select_static_lr(candidates, trial_iterations=2, columns=1, preset="smoke", log=log.append, **machine) == chosen
    assert sum("complete, skipped" in line for line in log) == 3


def test_static_lr_trials_keep_their_own_length_when_the_runs_set_theirs(tiny_data, tmp_path):
    # the real runs' length and evaluation schedule reach the trials among the overrides
    machine = dict(data_dir=str(tiny_data), download=False, validation_fraction=0.4, logdir=str(tmp_path))
    select_static_lr((0.1,), trial_iterations=3, columns=1, preset="smoke", log=lambda line: None,
                     iterations=50, eval_every=2, **machine)
    history = json.loads((tmp_path / "lrsel-static-1-lr0.1" / "metrics.json").read_text())["history"]
    assert [entry["iteration"] for entry in history] == [3]


def test_the_sweep_script_shares_the_one_k_cpt_check(tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "experiments" / "sweep.py"), "--k-cpts", "lots", "--logdir",
                             str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("k_cpt must be a number >= 0 (cost per MAC, e.g. 4e-9) or 'dynamic', got 'lots'")


# --- SIGKILL ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("agent, extra", [("actor", []), ("critic", ["--policy", "eps-greedy", "--execution", "sampled"])])
def test_sigkill_then_resume_gives_the_uninterrupted_metrics(agent, extra, tiny_data, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def command(name):
        return [sys.executable, str(REPO / "experiments" / "train_agent.py"),
                *args(tiny_data, tmp_path, name, "--iterations", "60", "--checkpoint-every", "10", "--eval-every", "20",
                      *extra, agent=agent)]

    subprocess.run(command("straight"), check=True, capture_output=True, timeout=600, env=env)
    process = subprocess.Popen(command("killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    checkpoint = tmp_path / "killed" / "checkpoint.pt"
    deadline = time.monotonic() + 600
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "killed" / "metrics.json").exists()
    resume = [sys.executable, str(REPO / "experiments" / "train_agent.py"), "--resume", str(tmp_path / "killed")]
    subprocess.run(resume, check=True, capture_output=True, timeout=600, env=env)
    straight, resumed = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("straight", "killed"))
    assert resumed["history"] == straight["history"] and resumed["test"] == straight["test"]


# --- issue 48: a checkpoint must agree with its run; damaged files on resume; a full disk at the end


def resumable(run_dir: Path) -> Path:
    """``run_dir`` made unfinished (its metrics gone): a resume evaluates its final checkpoint."""
    (run_dir / "metrics.json").unlink()
    return run_dir


def edit_checkpoint(run_dir: Path, edit) -> None:
    state = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    edit(state)
    torch.save(state, run_dir / "checkpoint.pt")


def test_a_checkpoint_with_nan_weights_is_never_resumed_or_evaluated(finished, capsys):
    def poison(state):
        next(t for t in state["learner"]["net"].values() if t.is_floating_point()).fill_(float("nan"))

    edit_checkpoint(resumable(finished), poison)
    err = refused(["--resume", str(finished)], capsys)
    assert f"refusing to load {finished / 'checkpoint.pt'}: its weights are not finite" in err
    assert not (finished / "metrics.json").exists()
    with pytest.raises(CheckpointError, match="its weights are not finite"):
        runs.load_run(finished)


@pytest.mark.parametrize("field, value", [("k_cpt", 1e-3), ("seed", 5), ("iterations", 6), ("lr", 0.5)])
def test_a_config_edited_by_hand_is_refused_by_its_checkpoint(field, value, finished, capsys):
    path = resumable(finished) / "config.json"
    config = json.loads(path.read_text())
    saved = TrainConfig.from_json(path.read_text()).resolved_values()[field]  # as trained: lr None is the learner's
    config[field] = value
    path.write_text(json.dumps(config))
    err = refused(["--resume", str(finished)], capsys)
    assert f"{field} {saved!r} (the config: {value!r})" in err and "restore those values in config.json" in err
    assert not (finished / "metrics.json").exists()


@pytest.mark.parametrize("damage, message", [
    (lambda state: state["training_state"].update(iteration=-5), "its iteration -5 is not a whole number in 0 ... 4"),
    (lambda state: state["training_state"].update(iteration="ten"), "its iteration 'ten' is not a whole number"),
    (lambda state: state.pop("sampler"), "it holds no sampler"),
], ids=["iteration -5", "iteration ten", "no sampler"])
def test_a_checkpoint_the_trainer_cannot_have_written_is_refused_on_resume(damage, message, finished, capsys):
    edit_checkpoint(resumable(finished), damage)
    err = refused(["--resume", str(finished)], capsys)
    assert f"cannot resume from {finished / 'checkpoint.pt'}: {message}" in err
    assert not (finished / "metrics.json").exists()


def test_a_checkpoint_written_before_it_recorded_its_settings_still_resumes(finished, capsys):
    from routing_rl.training.checkpoint import IDENTITY

    edit_checkpoint(resumable(finished), lambda state: state.update(identity={k: state["identity"][k] for k in IDENTITY}))
    assert main(["--resume", str(finished)]) == 0
    assert json.loads((finished / "metrics.json").read_text())["config"]["seed"] == 0


@pytest.mark.parametrize("content, message", [("[]", "it holds a JSON list, not a run's metrics"),
                                              ("{}", "its run is missing"),
                                              ('{"run": "x"}', "its agent is missing")])
def test_metrics_that_are_not_a_runs_are_one_line_on_resume(content, message, finished, capsys):
    (finished / "metrics.json").write_text(content)
    err = refused(["--resume", str(finished)], capsys)
    assert f"{finished / 'metrics.json'} is damaged ({message})" in err


def test_a_config_nested_too_deeply_is_one_line_on_resume(finished, capsys):
    (resumable(finished) / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    err = refused(["--resume", str(finished)], capsys)
    assert "config.json is not a valid run config: it nests too deeply to be read" in err


def test_a_full_disk_at_the_metrics_keeps_the_final_checkpoint(tiny_data, tmp_path, capsys, monkeypatch):
    import errno

    original = runs.atomic_write_text

    def full(path, text):
        if Path(path).name == "metrics.json":
            raise OSError(errno.ENOSPC, "No space left on device")
        original(path, text)

    monkeypatch.setattr(runs, "atomic_write_text", full)
    err = refused(args(tiny_data, tmp_path), capsys)
    run_dir = tmp_path / "run"
    assert f"no space left on device writing {run_dir / 'metrics.json'}; the run's checkpoints are kept" in err
    assert f"--resume {run_dir}" in err
    assert torch.load(run_dir / "checkpoint.pt", weights_only=True)["training_state"]["iteration"] == 4
    monkeypatch.setattr(runs, "atomic_write_text", original)  # space freed
    assert main(["--resume", str(run_dir)]) == 0 and (run_dir / "metrics.json").is_file()


def test_a_metrics_file_nested_too_deeply_beside_a_run_is_skipped_with_a_warning(tiny_data, tmp_path, capsys):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "metrics.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(args(tiny_data, tmp_path, "run")) == 0
    captured = capsys.readouterr()
    assert f"warning: {tmp_path / 'junk' / 'metrics.json'} is not a run's metrics (it nests too deeply to be read)" \
        in captured.err
    assert "test accuracy" in captured.out


def test_a_full_disk_at_tensorboards_last_writes_is_one_line_and_keeps_the_final_checkpoint(tiny_data, tmp_path, capsys,
                                                                                            monkeypatch):
    import errno
    import threading

    from tensorboard.summary.writer import record_writer

    run_dir, original = tmp_path / "run", record_writer.RecordWriter.write

    def full_after_the_final_checkpoint(self, data):
        if (run_dir / "checkpoint.pt").is_file() and torch.load(
                run_dir / "checkpoint.pt", weights_only=True)["training_state"]["iteration"] == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, data)

    printed = []  # what Python would print as "Exception in thread ..."
    monkeypatch.setattr(threading, "excepthook", printed.append)
    monkeypatch.setattr(record_writer.RecordWriter, "write", full_after_the_final_checkpoint)
    err = refused(args(tiny_data, tmp_path), capsys)
    assert f"no space left on device writing into {run_dir}; the checkpoints written are kept" in err
    assert printed == [], "the writer thread's failure is reported once, in the one line"
    monkeypatch.setattr(record_writer.RecordWriter, "write", original)  # space freed
    assert main(["--resume", str(run_dir)]) == 0 and (run_dir / "metrics.json").is_file()
