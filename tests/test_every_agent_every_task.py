"""Every ``--agent`` on every kind of routing task, through the command line.

Four tasks: the paper's images (``routing_rl/HybridRouting-v0``), video
(``routing_rl/VideoRouting-v0``), both on tiny synthetic MNIST/CIFAR files, and two plug-in
tasks written as ``docs/plugins.md`` teaches — an image task whose net is a tree and an
8-frame sequence task that carries the last prediction from frame to frame — on generated
data. Each agent trains for a few iterations, and its saved run is evaluated again through
``load_run``. Combinations that cannot make sense are refused with one line and exit status 2
before a run folder exists. The whole matrix is slow; a representative subset runs by default.
"""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import nn

from routing_rl.app.cli import main
from routing_rl.app.runs import TRAIN_FIT_FIELD, load_run, logged_train_accuracy
from routing_rl.core.graph import Node, RoutedNet
from routing_rl.data import RoutingDataset, Split
from routing_rl.envs import RoutingTask, register_task
from routing_rl.nets.router import Router
from routing_rl.agents.sb3 import SB3_AGENTS
from routing_rl.training.config import AGENTS
from routing_rl.training.evaluate import evaluate
from routing_rl.training.splits import training_splits

CLASSES = ("ring", "bar", "dot")
SOURCES = ("sharp", "blurred")


class Glyphs(RoutingTask):
    """1×8×8 glyphs of three classes, sharp or blurred, through a tree: a stem whose router
    sends each glyph to a cheap or a wide branch, each with its own head (no junction exits
    at once, so it is not a chain)."""

    archs = ("fork",)

    def __init__(self, n_train: int = 96, seed: int = 0):
        self.n_train, self.seed = n_train, seed

    def load_dataset(self) -> RoutingDataset:
        generator = torch.Generator().manual_seed(self.seed)
        patterns = torch.rand(len(CLASSES), 1, 8, 8, generator=generator)

        def split(n: int) -> Split:
            labels = torch.randint(len(CLASSES), (n,), generator=generator)
            source = torch.randint(len(SOURCES), (n,), generator=generator)
            noise = torch.randn(n, 1, 8, 8, generator=generator) * (0.2 + 0.6 * source[:, None, None, None])
            return Split(patterns[labels] + noise, labels, source)

        return RoutingDataset("glyphs", CLASSES, split(self.n_train), split(self.n_train // 2),
                              {"name": "glyphs", "n_train": self.n_train}, SOURCES)

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        channels = 4 * width
        nodes = {
            "stem": Node(nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU()),
                         ["cheap", "wide"], Router(channels * 64, 2, k_cpt_input)),
            "cheap": Node(nn.Sequential(nn.AvgPool2d(4), nn.Flatten()), ["cheap_exit"]),
            "cheap_exit": Node(nn.Linear(channels * 4, len(CLASSES))),
            "wide": Node(nn.Sequential(nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(), nn.Flatten()),
                         ["wide_exit"]),
            "wide_exit": Node(nn.Linear(2 * channels * 64, len(CLASSES))),
        }
        return RoutedNet(nodes, root="stem", input_shape=(1, 8, 8), classes=len(CLASSES), k_cpt_input=k_cpt_input)


FRAMES, FEATURES = 8, 6


class Drift(RoutingTask):
    """Sequences of 8 frames of 6 features whose class changes once in a while; the memory
    is the last prediction's logits, which the net reads beside each frame. A chain: a first
    stage may answer at once or hand its features to a second."""

    archs = ("two-stage",)

    def __init__(self, n_train: int = 24, seed: int = 0):
        self.n_train, self.seed = n_train, seed

    def load_dataset(self) -> RoutingDataset:
        generator = torch.Generator().manual_seed(self.seed)
        centres = 2 * torch.randn(len(CLASSES), FEATURES, generator=generator)

        def split(n: int) -> Split:
            first = torch.randint(len(CLASSES), (n, 1), generator=generator)
            changes = (torch.rand(n, FRAMES, generator=generator) < 0.2).long().cumsum(1)
            labels = (first + changes) % len(CLASSES)
            source = torch.randint(len(SOURCES), (n, 1), generator=generator).expand(n, FRAMES).contiguous()
            noise = torch.randn(n, FRAMES, FEATURES, generator=generator) * (0.5 + source[..., None])
            return Split(centres[labels] + noise, labels, source)

        return RoutingDataset("drift", CLASSES, split(self.n_train), split(self.n_train // 2),
                              {"name": "drift", "n_train": self.n_train}, SOURCES)

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        hidden = 8 * width
        inputs = FEATURES + len(CLASSES)
        nodes = {
            "stage1": Node(nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU()), ["exit1", "stage2"],
                           Router(hidden, 2, k_cpt_input)),
            "exit1": Node(nn.Linear(hidden, len(CLASSES))),
            "stage2": Node(nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.ReLU()), ["exit2"]),
            "exit2": Node(nn.Linear(4 * hidden, len(CLASSES))),
        }
        return RoutedNet(nodes, root="stage1", input_shape=(inputs,), classes=len(CLASSES), k_cpt_input=k_cpt_input)

    def initial_memory(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs.new_zeros(len(inputs), len(CLASSES))

    def net_input(self, inputs: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        return torch.cat([inputs, memory], 1)

    def carry(self, memory: torch.Tensor, inputs: torch.Tensor, logits: torch.Tensor, leaf: torch.Tensor) -> torch.Tensor:
        return logits.detach().to(memory.dtype)


for env_id, factory in (("tests/Glyphs-v0", Glyphs), ("tests/Drift-v0", Drift)):
    if env_id not in gym.registry:
        register_task(env_id, factory, k_cpt=1e-4)

TASKS = {
    "image": ["--env", "routing_rl/HybridRouting-v0", "--k-cpt", "4e-9"],
    "video": ["--env", "routing_rl/VideoRouting-v0", "--k-cpt", "4e-9", "--train-examples", "12"],
    "plugin-image": ["--env", "tests/Glyphs-v0", "--k-cpt", "1e-4"],
    "plugin-sequence": ["--env", "tests/Drift-v0", "--k-cpt", "1e-4"],
}
CRITIC_SETTINGS = [(policy, execution) for policy in ("softmax", "eps-greedy", "greedy") for execution in ("full", "sampled")]
AGENT_RUNS = {
    "static": [],
    "actor": [],
    **{f"{critic}-{policy}-{execution}": ["--agent", critic, "--policy", policy, "--execution", execution]
       for critic in ("pragmatic-critic", "optimistic-critic") for policy, execution in CRITIC_SETTINGS},
    "threshold": [],
    **{agent: ["--agent", agent, "--n-envs", "8"] for agent in SB3_AGENTS},
}
REFUSED = {("plugin-image", "threshold"): "threshold early exit needs a chain"}
"""Combinations of the matrix that cannot make sense, and the refusal's words."""
FAST = {("image", "pragmatic-critic-eps-greedy-sampled"), ("video", "pragmatic-critic-eps-greedy-sampled"),
        ("video", "threshold"), ("video", "static"), ("plugin-image", "threshold"),
        ("plugin-image", "optimistic-critic-greedy-sampled"), ("plugin-sequence", "static"),
        ("plugin-sequence", "threshold"), ("plugin-sequence", "actor"), ("plugin-sequence", "ppo")}
"""The default suite's share of the matrix (the rest is marked slow): every task, every
mechanism that broke on sequence tasks (sampled critics' batch-norm recalibration, threshold
fitting, static baselines), one SB3 agent."""


def agent_args(name: str) -> list[str]:
    return AGENT_RUNS[name] or ["--agent", name]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "every-agent-cache"))


def command(task: str, agent: str, data_dir, logdir, *extra) -> list[str]:
    sb3 = agent in SB3_AGENTS
    budget = ["--iterations", "3", "--batch-size", "8", "--eval-every", "2"] if sb3 else \
        ["--iterations", "2", "--batch-size", "8", "--eval-every", "1"]
    return [*TASKS[task], *agent_args(agent), "--preset", "smoke", *budget, "--eval-examples", "8", "--validation-fraction", "0.4",
            "--data-dir", str(data_dir), "--download", "false", "--device", "cpu", "--logdir", str(logdir),
            "--run-name", "run", "--json", *extra]


def matrix():
    for task in TASKS:
        for agent in AGENT_RUNS:
            marks = () if (task, agent) in FAST else (pytest.mark.slow,)
            yield pytest.param(task, agent, marks=marks, id=f"{task}-{agent}")


def assert_refused(code, capsys, logdir, words: str) -> None:
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and words in err, err
    assert not logdir.exists() or not any(logdir.iterdir()), "a refused run writes no folder"


@pytest.mark.parametrize("task, agent", list(matrix()))
def test_every_agent_trains_and_is_evaluated_on_every_task(task, agent, tiny_data, tmp_path, capsys):
    logdir = tmp_path / "runs"
    with pytest.raises(SystemExit) if (task, agent) in REFUSED else _returns() as outcome:
        code = main(command(task, agent, tiny_data, logdir))
    if (task, agent) in REFUSED:
        assert_refused(outcome.value.code, capsys, logdir, REFUSED[task, agent])
        return
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    metrics = json.loads((logdir / "run" / "metrics.json").read_text())
    iterations = metrics["config"]["iterations"]
    assert [entry["iteration"] for entry in metrics["history"]][-1] == iterations
    assert all(1 <= entry["iteration"] <= iterations for entry in metrics["history"])
    logged = tags(logdir / "run")
    assert {"charts/val_accuracy", "figures/node_link"} <= logged and any(t.startswith("routing/val_fraction/") for t in logged)
    assert printed["test_accuracy"] == metrics["test_accuracy"] and 0 <= metrics["test_accuracy"] <= 1
    # the record keeps the training-batch fit its events hold, for reports written from records alone
    assert (metrics[TRAIN_FIT_FIELD] is None) == ("charts/train_accuracy" not in logged)
    assert metrics[TRAIN_FIT_FIELD] == logged_train_accuracy(logdir / "run")
    result = metrics["test"][0]
    assert sum(leaf["fraction"] for leaf in result["leaves"].values()) == pytest.approx(1.0)
    config, loaded_task, net = load_run(logdir / "run")
    if config.agent == "static":
        assert not net.junctions and len(net.leaves) == 1
    again = evaluate(net, loaded_task.examples(loaded_task.dataset().test), config.k_cpt, classes=loaded_task.classes,
                     sources=loaded_task.sources, task=loaded_task)
    if task in ("video", "plugin-sequence"):
        assert result["clips"] > 0 and len(result["accuracy_by_frame"]) == loaded_task.dataset().test.frames
        assert "heads_alone" not in result, "a leaf alone on clips depends on the memory carried"
    elif net.junctions:  # every routing learner, SB3's too, is set beside each exit of its net used alone
        assert list(result["heads_alone"]) == list(net.leaves)
        assert all(0 <= v["accuracy"] <= 1 for v in result["heads_alone"].values())
    else:
        assert "heads_alone" not in result
    assert set(again["leaves"]) == set(result["leaves"]) and again["examples"] >= result["examples"]
    if config.agent not in ("threshold", *SB3_AGENTS):  # those route by their own rule, not the routers' argmax
        test = loaded_task.examples(training_splits(config, loaded_task.dataset())[2])  # as the run judged it
        evaluated = evaluate(net, test, config.k_cpt, classes=loaded_task.classes, sources=loaded_task.sources,
                             task=loaded_task)
        assert evaluated["accuracy"] == pytest.approx(metrics["test_accuracy"])


def tags(run_dir) -> set[str]:
    """Every scalar and image tag in a run's TensorBoard events."""
    found = set()
    for events in run_dir.glob("**/events.out.tfevents.*"):
        accumulator = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0})
        accumulator.Reload()
        found |= set(accumulator.Tags()["scalars"]) | set(accumulator.Tags()["images"])
    return found


class _returns:
    """A context that expects no exception (the counterpart of ``pytest.raises``)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


NONSENSE = [
    ("image", ["--agent", "static", "--arch", "chain"], "the static agent trains nets without junctions"),
    ("image", ["--agent", "actor", "--arch", "static-3"], "needs junctions to route at"),
    ("image", ["--agent", "threshold", "--arch", "tree"], "threshold early exit puts a head on every column"),
    ("image", ["--agent", "static", "--k-cpt", "dynamic"], "has no routers to read k_cpt"),
    ("image", ["--agent", "actor", "--execution", "sampled"], "the actor needs the full tree"),
    ("video", ["--agent", "static", "--arch", "static-reuse"], "unknown arch 'static-reuse'"),
    ("video", ["--agent", "critic", "--error-cost", "zero_one"], "has no gradient for the heads"),
    ("plugin-image", ["--agent", "threshold"], "threshold early exit needs a chain"),
    ("plugin-image", ["--agent", "static", "--arch", "fork"], "use one of static-cheap_exit, static-wide_exit"),
    ("plugin-sequence", ["--agent", "dqn", "--arch", "static-exit2"], "needs junctions to route at"),
    ("plugin-sequence", ["--agent", "ppo", "--policy", "eps-greedy"], "can only use softmax"),
]


@pytest.mark.parametrize("task, args, words", NONSENSE, ids=[f"{t}-{' '.join(a[1:])}" for t, a, _ in NONSENSE])
def test_combinations_that_cannot_make_sense_are_refused_before_a_run_folder_exists(task, args, words, tiny_data, tmp_path,
                                                                                  capsys):
    logdir = tmp_path / "runs"
    base = command(task, "static", tiny_data, logdir)
    base = base[: base.index("--agent")] + base[base.index("--agent") + 2:]  # the agent comes from args
    with pytest.raises(SystemExit) as refused:
        main([*base, *args])
    assert_refused(refused.value.code, capsys, logdir, words)


def test_static_baselines_of_a_plug_in_are_the_routed_nets_paths():
    task = Glyphs()
    assert task.static_archs() == ("static-cheap_exit", "static-wide_exit")
    assert task.default_arch("static") == "static-wide_exit" and task.default_arch("actor") == "fork"
    routed = task.make_net("fork", seed=3)
    static = task.make_net("static-wide_exit", seed=3)
    assert not static.junctions and static.leaves == ["wide_exit"]
    assert static.leaf_path_macs[0] == routed.path_macs("wide_exit") - routed.router_macs["stem"]
    x = torch.randn(5, 1, 8, 8)
    routed.eval(), static.eval()
    torch.testing.assert_close(static(x).logits["wide_exit"], routed(x).logits["wide_exit"])


def test_the_node_link_figure_names_the_task_s_own_sources_and_leaves():
    from routing_rl.app.describe import summary
    from routing_rl.app.plots import mix_legend, node_link_figure

    task = Glyphs()
    net = task.make_net("fork")
    result = evaluate(net, task.dataset().test, 1e-4, classes=task.classes, sources=task.sources)
    assert mix_legend(result) == "blue: sharp / red: blurred"
    figure = node_link_figure([("glyphs", summary(net), result)])
    texts = {text.get_text() for ax in figure.axes for text in ax.texts} | {ax.get_title() for ax in figure.axes}
    assert {"cheap_exit", "wide_exit"} <= texts
    assert "what exits there (blue: sharp / red: blurred)" in texts and not any("MNIST" in t for t in texts)


def test_what_would_fail_after_training_fails_before_the_run_folder_exists(tiny_data, tmp_path, capsys, monkeypatch):
    from routing_rl.agents.threshold import ThresholdLearner
    from routing_rl.app import trainer

    def broken(self, validation):
        raise ValueError("thresholds cannot be fitted")

    monkeypatch.setattr(ThresholdLearner, "evaluation_points", broken)
    monkeypatch.setattr(trainer, "fit", lambda *args, **kwargs: pytest.fail("training started"))
    logdir = tmp_path / "runs"
    with pytest.raises(SystemExit) as refused:
        main(command("plugin-sequence", "threshold", tiny_data, logdir))
    assert_refused(refused.value.code, capsys, logdir, "thresholds cannot be fitted")


def test_a_run_makes_no_more_video_clips_than_its_caps_use():
    from routing_rl.app.runs import task_for
    from routing_rl.envs.video_task import VideoTask
    from routing_rl.training.config import TrainConfig
    from test_video import tiny_images

    task = task_for(TrainConfig(env="routing_rl/VideoRouting-v0", train_examples=18, eval_examples=5,
                                validation_fraction=0.1))
    assert (task.train_clips, task.test_clips) == (20, 5)  # 18 training clips and the validation share beside them
    made = VideoTask(frames=3, train_examples=7, eval_examples=2, images=tiny_images()).dataset()
    assert (len(made.train), len(made.test), made.train.frames) == (7, 2, 3)
