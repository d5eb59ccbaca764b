"""Issue 48's plug-in battery: the settings a task is registered with are a run's defaults,
every learner trains on the task's error cost, non-finite data and outputs are refused, the
env keywords are type-checked, and a plug-in's own failures are named in one line."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from routing_rl.agents.registry import make_learner
from routing_rl.app.cli import main
from routing_rl.core.graph import Node, RoutedNet
from routing_rl.data import RoutingDataset, Split, load_dataset
from routing_rl.envs import ImageTask, RoutingSB3VecEnv, RoutingTask, register_task
from routing_rl.envs.task import TaskError
from routing_rl.nets.router import Router
from routing_rl.training.config import make_config
from routing_rl.training.evaluate import NonFiniteEvaluationError, evaluate, heads_alone

CLASSES = ("a", "b", "c")
FAILURES = ("constructor", "load_dataset", "build_net", "augment", "forward", "inputs", "error_cost", "value_error")
"""Where a :class:`Chain` made with ``fail=`` fails: its own methods, its net's forward (which
``RoutedNet`` runs to count MACs), a net for other inputs than the data's, or a ValueError of
its own in ``load_dataset``."""


class Broken(nn.Module):
    """A layer whose forward fails, as a plug-in's own module may."""

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("broken forward")


class Chain(RoutingTask):
    """Six features of three classes through a two-stage chain (``stage1`` may exit at once).

    ``fail``: where the task fails (:data:`FAILURES`); ``nan_test``: half the test inputs are
    NaN; ``label``: the first test label; ``offset``: added to every c_err."""

    archs = ("chain",)

    def __init__(self, fail: str | None = None, nan_test: bool = False, label: int | None = None, offset: float = 0.0):
        if fail == "constructor":
            raise RuntimeError("no such option")
        self.fail, self.nan_test, self.label, self.offset = fail, nan_test, label, offset
        self.costs = 0  # calls of error_cost

    def load_dataset(self) -> RoutingDataset:
        if self.fail == "load_dataset":
            raise RuntimeError("the data server is down")
        if self.fail == "value_error":
            raise ValueError("n_train must be even")
        generator = torch.Generator().manual_seed(0)

        def split(n: int) -> Split:
            labels = torch.randint(len(CLASSES), (n,), generator=generator)
            return Split(torch.randn(n, 6, generator=generator) + labels[:, None], labels, torch.zeros(n, dtype=torch.long))

        test = split(32)
        if self.nan_test:
            test.images[::2] = math.nan
        if self.label is not None:
            test.labels[0] = self.label
        return RoutingDataset("chain", CLASSES, split(64), test, {"name": "chain"}, ("all",))

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        if self.fail == "build_net":
            raise RuntimeError("no net of that name")
        deep = Broken() if self.fail == "forward" else nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        features = 7 if self.fail == "inputs" else 6
        nodes = {
            "stage1": Node(nn.Sequential(nn.Linear(features, 8), nn.ReLU()), ["exit1", "stage2"], Router(8, 2, k_cpt_input)),
            "exit1": Node(nn.Linear(8, len(CLASSES))),
            "stage2": Node(deep, ["exit2"]),
            "exit2": Node(nn.Linear(8, len(CLASSES))),
        }
        return RoutedNet(nodes, root="stage1", input_shape=(features,), classes=len(CLASSES), k_cpt_input=k_cpt_input)

    def augment(self, inputs: torch.Tensor, source: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        if self.fail == "augment":
            raise RuntimeError("augmentation needs a GPU")
        return inputs

    def error_cost(self, logits: torch.Tensor, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
        if self.fail == "error_cost":
            raise RuntimeError("no cost for these labels")
        self.costs += 1
        return super().error_cost(logits, labels, kind) + self.offset


class Frames(Chain):
    """Clips of four frames of :class:`Chain`'s features (a task of sequences, no memory)."""

    def load_dataset(self) -> RoutingDataset:
        flat = super().load_dataset()

        def clips(split: Split) -> Split:
            return Split(split.images.view(-1, 4, 6), split.labels.view(-1, 4), split.source.view(-1, 4))

        return RoutingDataset("frames", CLASSES, clips(flat.train), clips(flat.test), {"name": "frames"}, ("all",))


ENV = "tests/SafetyChain-v0"
for env_id, options in {ENV: {"k_cpt": 2e-6}, "tests/SafetyChainZeroOne-v0": {"error_cost": "zero_one", "width": 2},
                        "tests/SafetyChainBounded-v0": {"max_error_cost": 5.0},
                        "tests/SafetyChainNaN-v0": {"nan_test": True}, "tests/SafetyChainLabel-v0": {"label": 7},
                        **{f"tests/SafetyChain-{fail}-v0": {"fail": fail} for fail in FAILURES}}.items():
    if env_id not in gym.registry:
        register_task(env_id, Chain, **options)


def run(tmp_path, capsys, env: str, *flags: str) -> tuple[int, str, str]:
    """``train_agent.py --env env`` with a smoke schedule into ``tmp_path/runs/run``: (exit status, stdout, stderr)."""
    argv = ["--env", env, "--preset", "smoke", "--iterations", "2", "--eval-every", "2", "--device", "cpu",
            "--logdir", str(tmp_path / "runs"), "--run-name", "run", *flags]
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


def refused(code: int, err: str, tmp_path) -> str:
    """The one line of a refusal, after checking that nothing was written."""
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "runs" / "run").exists(), "a refused run writes no folder"
    return err


# --- item 1: what a task is registered with is the run's default ------------------------------


def test_a_registered_k_cpt_is_what_the_run_trains_with(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, ENV, "--agent", "actor", "--json")
    assert code == 0 and "note" not in err
    assert json.loads((tmp_path / "runs" / "run" / "config.json").read_text())["k_cpt"] == 2e-6
    assert json.loads((tmp_path / "runs" / "run" / "metrics.json").read_text())["k_cpt"] == 2e-6


def test_a_flag_overrides_a_registered_setting_with_a_one_line_note(tmp_path, capsys):
    code, out, err = run(tmp_path, capsys, ENV, "--agent", "actor", "--k-cpt", "1e-4", "--print-config")
    assert code == 0 and json.loads(out)["k_cpt"] == 1e-4
    assert err.strip() == f"train_agent.py: note: --k-cpt 1e-4 overrides the k_cpt 2e-06 that {ENV} is registered with"
    code, out, err = run(tmp_path, capsys, ENV, "--agent", "actor", "--k-cpt", "2e-6", "--print-config")
    assert code == 0 and json.loads(out)["k_cpt"] == 2e-6 and err == "", "the registered value again: nothing overridden"


def test_every_registered_setting_is_a_default_and_the_static_agent_keeps_its_own_nets(tmp_path, capsys):
    code, out, _ = run(tmp_path, capsys, "tests/SafetyChainZeroOne-v0", "--agent", "actor", "--print-config")
    config = json.loads(out)
    assert code == 0 and (config["error_cost"], config["width"], config["arch"]) == ("zero_one", 2, "chain")
    code, out, err = run(tmp_path, capsys, "tests/SafetyChainZeroOne-v0", "--agent", "static", "--error-cost",
                         "cross_entropy", "--print-config")
    assert code == 0 and json.loads(out)["arch"] == "static-exit2", "the static agent trains a static net"
    assert "--error-cost cross_entropy overrides the error_cost 'zero_one'" in err


def test_a_registered_setting_a_run_cannot_honour_is_refused_in_one_line(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "tests/SafetyChainBounded-v0", "--agent", "dqn")
    assert "registered with max_error_cost=5.0, which a training run cannot honour" in refused(code, err, tmp_path)


# --- item 16: every learner trains on the task's error cost ------------------------------------


@pytest.mark.parametrize("agent, arch, flags", [
    ("static", "static-exit2", {}), ("actor", "chain", {}), ("pragmatic-critic", "chain", {}),
    ("pragmatic-critic", "chain", {"execution": "sampled", "policy": "eps-greedy"}),
    ("optimistic-critic", "chain", {}), ("threshold", "chain", {}),
])
def test_every_learner_trains_on_the_tasks_error_cost(agent, arch, flags):
    c_err = []
    for offset in (0.0, 5.0):
        task = Chain(offset=offset)
        config = make_config("smoke", task.all_archs(), task.static_archs(), agent=agent, arch=arch, **flags)
        learner = make_learner(config, task, torch.device("cpu"))
        batch = task.dataset().train.subset(torch.arange(16))
        task.costs = 0
        c_err.append(learner.train_step(batch, 0)["losses/c_err"])
        assert task.costs > 0, f"{agent} never asked the task for c_err"
    assert c_err[1] - c_err[0] >= 5.0 - 1e-4, f"{agent}'s c_err is not the task's: {c_err}"


@pytest.mark.parametrize("agent", ["static", "actor", "pragmatic-critic", "threshold", "dqn"])
def test_a_task_whose_error_cost_fails_is_refused_by_every_learner(agent, tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "tests/SafetyChain-error_cost-v0", "--agent", agent)
    assert "task Chain: its error_cost() raised RuntimeError: no cost for these labels" in refused(code, err, tmp_path)


# --- item 17: NaN is refused at load time and never evaluated ---------------------------------


def test_nan_inputs_of_a_plugin_are_refused_when_loaded(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "tests/SafetyChainNaN-v0", "--agent", "actor")
    line = refused(code, err, tmp_path)
    assert "task Chain (dataset 'chain'): the test split's inputs hold 96 NaN or infinite values" in line
    assert "fix Chain.load_dataset()" in line and "--lr" not in line
    with pytest.raises(ValueError, match="the test split's inputs hold 96 NaN"):
        gym.make("tests/SafetyChainNaN-v0")


def test_a_cache_entry_with_nan_test_images_is_refused_naming_the_cache(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    load_dataset("mnist", data_dir=tiny_data, download=False)
    (entry,) = (tmp_path / "cache").glob("dataset-mnist-*.pt")
    tensors = torch.load(entry, weights_only=True)
    tensors["test_images"][: len(tensors["test_images"]) // 2] = math.nan
    torch.save(tensors, entry)
    with pytest.raises(ValueError, match=r"task ImageTask \(dataset 'mnist'\): the test split's inputs hold \d+ NaN") as raised:
        ImageTask("mnist", data_dir=tiny_data, download=False).dataset()
    assert f"cache folder {tmp_path / 'cache'} is damaged: delete its files" in str(raised.value)


def nan_weights(net: RoutedNet) -> RoutedNet:
    with torch.no_grad():
        next(net.nodes["stage1"].transform.parameters()).fill_(math.nan)
    return net


def test_the_evaluator_never_reports_an_accuracy_computed_from_nan():
    task = Chain()
    test = task.dataset().test
    with pytest.raises(NonFiniteEvaluationError, match="outputs are NaN on 32 of the 32 examples .* whose inputs are finite"):
        evaluate(nan_weights(task.make_net()), test)
    with pytest.raises(NonFiniteEvaluationError, match="outputs are NaN"):
        heads_alone(nan_weights(task.make_net()), test)
    half_nan = Split(test.images.clone(), test.labels, test.source)
    half_nan.images[::2] = math.nan
    with pytest.raises(NonFiniteEvaluationError, match="16 of the 32 examples evaluated hold NaN or infinite inputs"):
        evaluate(task.make_net(), half_nan)
    assert 0 <= evaluate(task.make_net(), test)["accuracy"] <= 1
    frames = Frames()
    with pytest.raises(NonFiniteEvaluationError, match="outputs are NaN on 32 of the 32 examples"):
        evaluate(nan_weights(frames.make_net()), frames.dataset().test, task=frames)
    assert 0 <= evaluate(frames.make_net(), frames.dataset().test, task=frames)["accuracy"] <= 1


# --- item 20: env keywords are checked for type and range -------------------------------------


@pytest.mark.parametrize("keywords", [
    {"train": "false"}, {"clip_actions": "no"}, {"k_cpt": True}, {"split": 3}, {"joint": "abc"}, {"net": "abc"},
    {"seed": 2**70}, {"seed": -1}, {"seed": 1.5}, {"width": True}, {"arch": 3}, {"error_cost": ["zero_one"]},
    {"max_error_cost": True}, {"device": 3.5}, {"share": ""}, {"joint": {"lr": "fast"}}, {"joint": {"augment": "yes"}},
], ids=str)
def test_env_keywords_of_a_wrong_type_or_range_are_refused_in_one_line(keywords):
    (name,) = keywords
    for make in (lambda: gym.make(ENV, **keywords), lambda: gym.make_vec(ENV, num_envs=2, **keywords),
                 lambda: RoutingSB3VecEnv.make(ENV, num_envs=2, **keywords)):
        with pytest.raises(ValueError, match=f"^{name} must be ") as raised:
            make()
        assert len(str(raised.value).splitlines()) == 1


def test_the_sb3_vec_envs_own_seeds_are_checked():
    for seed in (-1, "abc", True):
        with pytest.raises(ValueError, match="^seed must be an integer"):
            RoutingSB3VecEnv(2, seed=seed, task=Chain())
    with pytest.raises(ValueError, match="^net_seed must be an integer"):
        RoutingSB3VecEnv(2, net_seed=2**70, task=Chain())


# --- item 27: a plug-in's failures name the task and the method --------------------------------


WORDS = {
    "constructor": "task Chain: its constructor raised RuntimeError: no such option",
    "load_dataset": "task Chain: its load_dataset() raised RuntimeError: the data server is down",
    "build_net": "task Chain: its build_net() raised RuntimeError: no net of that name",
    "augment": "task Chain: its augment() raised RuntimeError: augmentation needs a GPU",
    "forward": "task Chain: its build_net() raised RuntimeError: broken forward",
    "inputs": "task Chain: the net build_net('chain') built fails on the task's training inputs: ValueError: ",
    "value_error": "task Chain: its load_dataset() raised ValueError: n_train must be even",
}


@pytest.mark.parametrize("fail", list(WORDS))
def test_a_plugins_failure_is_one_line_naming_the_task_and_the_method(fail, tmp_path, capsys):
    env = f"tests/SafetyChain-{fail}-v0"
    code, _, err = run(tmp_path, capsys, env, "--agent", "actor")
    line = refused(code, err, tmp_path)
    assert WORDS[fail] in line and line.rstrip().endswith("--verbose shows the trace")
    code, _, err = run(tmp_path, capsys, env, "--agent", "actor", "--verbose")
    assert code == 2 and WORDS[fail] in err.splitlines()[0]
    assert "Traceback (most recent call last)" in err, "--verbose shows the trace"
    assert fail == "inputs" or "test_safety_plugins.py" in err, "down to the plug-in's own line"
    with pytest.raises(TaskError, match=WORDS[fail].split(":")[0]):
        gym.make(env)


def test_labels_out_of_range_are_refused_when_loaded(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, "tests/SafetyChainLabel-v0", "--agent", "static")
    line = refused(code, err, tmp_path)
    assert "the test split's labels run from 0 to 7, but the dataset names 3 classes" in line
    assert "IndexError" not in line and "--lr" not in line
