"""The learner registry (routing_rl.training.learners): each learner owns its options and
refusals, a learner of another package trains through train_agent.py, and configs and
checkpoints written before the registry still load and resume."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.app.cli import main
from routing_rl.envs.joint import JointTraining
from routing_rl.training.checkpoint import PLACE, settings_disagreement
from routing_rl.training.config import BEFORE_NESTING, RESUME_OVERRIDES, TrainConfig, make_config
from routing_rl.training.learners import EnvTraining, LearnerOptions, LearnerSpec, learner_names, learner_spec, register_learner

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BEFORE = "config-before-learner-options-{}.json"
"""config.json files written by the code before the registry (flat fields; for SB3 agents
``execution`` chose the env's joint training)."""


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "learners-cache"))


def flat_identity(values: dict) -> dict:
    """What a checkpoint written before the registry recorded for a config of ``values``."""
    return {name: value for name, value in values.items() if name not in (*RESUME_OVERRIDES, *PLACE)}


def test_every_package_learner_is_registered_with_its_defaults():
    assert set(learner_names()) >= {"static", "actor", "pragmatic-critic", "optimistic-critic", "threshold",
                                    "dqn", "ppo", "a2c"}
    assert learner_spec("critic").name == "pragmatic-critic"
    assert make_config("smoke", agent="actor").options.tau == 1.0
    assert make_config("smoke", agent="dqn").options.double_q is True
    with pytest.raises(ValueError, match="unknown agent 'nope'; choose one of"):
        make_config("smoke", agent="nope")


@pytest.mark.parametrize("agent, arch", [("static", "static-2"), ("threshold", "chain"), ("dqn", "chain")])
def test_sampled_execution_is_refused_where_no_learner_reads_it(agent, arch):
    with pytest.raises(ValueError, match=f"--execution sampled chooses how a critic trains; '{agent}' does not read it"):
        make_config("smoke", agent=agent, arch=arch, execution="sampled")


def test_joint_execution_belongs_to_the_learners_that_train_through_the_env():
    assert JointTraining.from_config(make_config("smoke", agent="ppo", joint_execution="sampled")).execution == "sampled"
    assert JointTraining.from_config(make_config("smoke", agent="ppo")).execution == "full"
    with pytest.raises(ValueError, match="--joint-execution chooses how the routing env trains the features"):
        make_config("smoke", agent="actor", joint_execution="sampled")


def test_the_old_execution_flag_of_the_sb3_agents_is_an_alias_with_a_note(capsys):
    assert main(["--agent", "dqn", "--preset", "smoke", "--execution", "sampled", "--print-config"]) == 0
    out, err = capsys.readouterr()
    config = json.loads(out)
    assert config["learner_options"] == {"joint_execution": "sampled"}
    assert "--execution for dqn is deprecated: it is now --joint-execution sampled" in err


def test_a_config_json_written_before_the_registry_loads_with_the_joint_execution_moved():
    saved = json.loads((FIXTURES / BEFORE.format("dqn")).read_text())
    assert saved["execution"] == "sampled" and "joint_execution" not in saved
    config = TrainConfig.from_json(json.dumps(saved)).validate()
    assert config.options.joint_execution == "sampled" and not hasattr(config.options, "execution")
    assert JointTraining.from_config(config).execution == "sampled"
    assert settings_disagreement(flat_identity(saved), config) is None  # its checkpoints' settings agree
    assert "uniform_weight" in settings_disagreement({**flat_identity(saved), "uniform_weight": 0.25}, config)


def test_a_run_written_before_the_registry_resumes(tiny_data, cache, tmp_path, capsys, monkeypatch):
    """A critic run with --execution sampled, interrupted after iteration 2: its config.json as
    the code before the registry wrote it (the fixture) and its checkpoint's flat identity."""
    from routing_rl.agents.critic import CriticLearner

    saved = json.loads((FIXTURES / BEFORE.format("critic")).read_text())
    original = CriticLearner.train_step

    def interrupted(self, batch, iteration):
        if iteration == 3:
            raise KeyboardInterrupt
        return original(self, batch, iteration)

    monkeypatch.setattr(CriticLearner, "train_step", interrupted)
    args = ["--agent", saved["agent"], "--policy", saved["policy"], "--execution", saved["execution"], "--preset", "smoke",
            "--iterations", "4", "--eval-every", "2", "--checkpoint-every", "2", "--data-dir", str(tiny_data),
            "--download", "false", "--validation-fraction", "0.4", "--logdir", str(tmp_path), "--run-name", saved["run_name"]]
    assert main(args) == 130
    monkeypatch.setattr(CriticLearner, "train_step", original)
    run_dir = tmp_path / saved["run_name"]
    (run_dir / "config.json").write_text(json.dumps({**saved, "logdir": str(tmp_path)}, indent=2, sort_keys=True))
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    checkpoint["identity"] = flat_identity(saved)
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    capsys.readouterr()
    assert main(["--resume", str(run_dir), "--data-dir", str(tiny_data)]) == 0, capsys.readouterr().err
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [entry["iteration"] for entry in metrics["history"]] == [2, 4]


def toy_module() -> str:
    """The example learner of docs/architecture.md, as written there, reporting what it trains with."""
    page = (REPO / "docs" / "architecture.md").read_text()
    example = page.split("```python\n# mypkg/toy.py\n", 1)[1].split("```", 1)[0]
    return example + """

def _train_step(self, batch, iteration):
    scalars = ActorLearner.train_step(self, batch, iteration)
    return {**scalars, "toy/gain": self.config.options.gain, "toy/tau": self.policy.start}


ToyLearner.train_step = _train_step
"""


def test_a_learner_registered_outside_the_package_trains_through_train_agent(tiny_data, tmp_path):
    """One file on PYTHONPATH, named ``--agent module:name``: its own option is a flag, its
    defaults apply, and its config.json loads in a new process (its module imported again, as
    ``--resume`` loads it)."""
    (tmp_path / "toy_learner.py").write_text(toy_module())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "ROUTING_RL_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, str(REPO / "experiments" / "train_agent.py"), "--agent", "toy_learner:toy", "--gain", "0.5",
            "--preset", "smoke", "--iterations", "2", "--eval-every", "2", "--checkpoint-every", "2",
            "--data-dir", str(tiny_data), "--download", "false", "--validation-fraction", "0.4",
            "--logdir", str(tmp_path / "runs"), "--run-name", "toy"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "runs" / "toy"
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["agent"], config["learner_options"]) == ("toy_learner:toy", {"gain": 0.5, "tau_half_life": 10})  # the preset's
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    assert {event.value for event in events.Scalars("toy/gain")} == {0.5}
    assert {event.value for event in events.Scalars("toy/tau")} == {2.0}
    load = ("from pathlib import Path; from routing_rl.training.config import TrainConfig; "
            f"c = TrainConfig.from_json(Path({str(run_dir / 'config.json')!r}).read_text()).validate(); "
            "print(c.options.gain, c.options.tau)")
    loaded = subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=600)
    assert loaded.stdout.split() == ["0.5", "2.0"], loaded.stderr
    refused = subprocess.run([*args[:4], "--preset", "smoke", "--print-config"], env={**env, "PYTHONPATH": ""},
                             capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "cannot import the learner's module 'toy_learner'" in refused.stderr


def test_a_learner_options_must_subclass_learner_options():
    @dataclasses.dataclass
    class Loose:
        gain: float = 1.0

    with pytest.raises(TypeError, match="options must be a dataclass subclassing LearnerOptions"):
        register_learner(LearnerSpec("loose", Loose))
    assert issubclass(learner_spec("actor").options, LearnerOptions)


def test_a_learner_option_of_the_wrong_type_is_one_line(tmp_path, monkeypatch):
    from routing_rl.training import learners

    monkeypatch.setattr(learners, "_REGISTRY", dict(learners._REGISTRY))  # the toy leaves with the test
    (tmp_path / "toy_learner_typed.py").write_text(toy_module())
    monkeypatch.syspath_prepend(str(tmp_path))
    assert make_config("smoke", agent="toy_learner_typed:toy", learner_options={"gain": 2}).options.gain == 2
    with pytest.raises(ValueError, match="gain must be a number, got 'strong'"):
        make_config("smoke", agent="toy_learner_typed:toy", learner_options={"gain": "strong"})
    with pytest.raises(ValueError, match="--gain is read by toy; agent 'actor' does not read it: drop it"):
        make_config("smoke", agent="actor", learner_options={"gain": 2.0})
    with pytest.raises(ValueError, match="agent 'actor' has no option grain; drop it from learner_options"):
        make_config("smoke", agent="actor", learner_options={"grain": 2.0})


def test_an_sb3_run_written_before_joint_execution_resumes(tiny_data, cache, tmp_path):
    """A dqn run whose config.json says ``execution: sampled``, as written before the env's
    feature training had a flag of its own: it resumes with that feature training."""
    args = ["--agent", "dqn", "--joint-execution", "sampled", "--uniform-weight", "0.5", "--preset", "smoke",
            "--iterations", "4", "--eval-every", "2", "--checkpoint-every", "2", "--data-dir", str(tiny_data),
            "--download", "false", "--validation-fraction", "0.4", "--logdir", str(tmp_path), "--run-name", "dqn"]
    assert main(args) == 0
    run_dir = tmp_path / "dqn"
    (run_dir / "metrics.json").unlink()
    written = json.loads((run_dir / "config.json").read_text())
    options = written.pop("learner_options")
    before = {**BEFORE_NESTING, **written, **options, "execution": "sampled"}
    # a config of then lacks the fields added since: they take their defaults
    for added_since in ("joint_execution", "precision", "cuda_graphs", "lr_warmup"):
        del before[added_since]
    assert set(before) == set(json.loads((FIXTURES / BEFORE.format("dqn")).read_text()))  # the fields of then
    (run_dir / "config.json").write_text(json.dumps(before, indent=2, sort_keys=True))
    assert main(["--resume", str(run_dir)]) == 0
    assert (run_dir / "metrics.json").is_file()


def test_a_flat_option_of_a_config_written_before_the_nesting_moves_under_learner_options():
    """A config.json written before the learners' options nested names them at its top level:
    those its learner declares move into learner_options, the others (which it never read) go."""
    saved = json.loads((FIXTURES / BEFORE.format("critic")).read_text())
    saved.update(k_ure=0.01, score_start="guess", k_dec=0.5)  # k_dec: the actor's, which a critic never read
    config = TrainConfig.from_json(json.dumps(saved)).validate()
    options = config.options
    assert (options.k_ure, options.score_start, options.execution, options.policy) == (0.01, "guess", "sampled", "eps-greedy")
    written = json.loads(config.to_json())
    assert written["learner_options"]["k_ure"] == 0.01 and not {"k_ure", "k_dec", "execution"} & set(written)
    assert "k_dec" not in written["learner_options"] and not hasattr(options, "k_dec")
    assert TrainConfig.from_json(config.to_json()) == config, "written nested, it reads back the same"


@pytest.mark.parametrize("agent, flag, value, words", [
    ("static", "tau", 0.5, "--tau is read by actor, optimistic-critic, pragmatic-critic; agent 'static' does not read it"),
    ("actor", "k_ure", 0.1, "--k-ure is read by optimistic-critic, pragmatic-critic; agent 'actor' does not read it"),
    ("ppo", "side_heads", False, "--side-heads is read by dqn, optimistic-critic, pragmatic-critic; agent 'ppo' does not"),
])
def test_a_learner_refuses_an_option_it_does_not_read(agent, flag, value, words):
    """Once silently ignored: a learner's options say what it reads, and anything else is one line."""
    with pytest.raises(ValueError, match=words):
        make_config("smoke", agent=agent, arch="static-2" if agent == "static" else "chain", **{flag: value})


def test_a_learner_that_trains_through_the_env_is_run_by_its_spec(tiny_data, cache, tmp_path, monkeypatch):
    """The run asks the learner's spec, not a list of names: a learner of another package that
    trains through the env is checked, sized, trained, resumed and loaded by its EnvTraining."""
    from routing_rl.app import runs
    from routing_rl.training import learners

    monkeypatch.setattr(learners, "_REGISTRY", dict(learners._REGISTRY))  # it leaves with the test
    calls = []

    class Trained(Exception):
        pass

    def train(config, task, run_dir, device, **kwargs):
        calls.append("train")
        raise Trained

    hooks = EnvTraining(train=train, load=lambda run_dir, device: calls.append("load") or torch.nn.Linear(1, 1),
                        has_checkpoint=lambda run_dir: calls.append("has_checkpoint") or True,
                        check=lambda config: calls.append("check"),
                        check_fits=lambda config, task, device: calls.append("check_fits"), sizes=lambda config: "")
    register_learner(LearnerSpec("through-env", policies=("softmax",), env_training=hooks))
    config = make_config("smoke", agent="through-env", data_dir=str(tiny_data), download=False, validation_fraction=0.4,
                         logdir=str(tmp_path), run_name="run")
    with pytest.raises(Trained):
        runs.train(config)
    assert runs.has_checkpoint(tmp_path / "run", config)
    runs.load_run(tmp_path / "run")
    assert calls == ["check", "check_fits", "train", "has_checkpoint", "check", "load"]


def test_a_sweeps_shared_option_goes_to_the_runs_whose_learner_reads_it():
    """``--set tau_half_life=7`` is every run's schedule, as a preset's half-lives are: the
    learners that read it take it, the static nets (which would refuse it) do not get it."""
    from routing_rl.app.sweep import sweep_configs

    configs = sweep_configs(["actor", "pragmatic-critic"], [4e-9], static_columns=[2], preset="smoke",
                            tau_half_life=7, k_ure=0.01)
    options = {config.agent: config.learner_options for config in configs}
    assert "tau_half_life" not in options["static"] and "k_ure" not in options["actor"]
    assert (options["actor"]["tau_half_life"], options["pragmatic-critic"]["tau_half_life"]) == (7, 7)
    assert options["pragmatic-critic"]["k_ure"] == 0.01


def test_learners_are_listed_by_name_whatever_the_process_imported_first():
    """The flag page lists options in this order: a test run that imported the threshold before
    the first look-up wrote another page than `python -m routing_rl.app.flags`."""
    names = learner_names()
    assert list(names) == sorted(names) and {"actor", "threshold", "dqn"} <= set(names)
