"""The task API: plug-in tasks through gym.make, make_vec, the SB3 vec env and the evaluator."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env as gym_check_env
from helpers import vector_tree
from routing_rl.envs import (
    JointTraining,
    RoutingEnv,
    RoutingGymVectorEnv,
    RoutingSB3VecEnv,
    RoutingTask,
    RoutingVecEnv,
    make_task,
    register_task,
)
from routing_rl.envs.task import task_from_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import routing_rl  # noqa: F401  (registers the built-in ids)
from routing_rl.core.graph import Node, RoutedNet
from routing_rl.data import RoutingDataset, Split
from routing_rl.nets.router import Router
from routing_rl.training.evaluate import evaluate

LOADS = []  # one entry per dataset a VectorTask loaded


class VectorTask(RoutingTask):
    """Six-feature vectors of three classes from two named sources, through ``vector_tree``."""

    archs = ("tree",)

    def __init__(self, examples: int = 30):
        self.examples_per_split = examples

    def load_dataset(self) -> RoutingDataset:
        LOADS.append(self)
        generator = torch.Generator().manual_seed(0)
        n = self.examples_per_split
        split = Split(torch.randn(n, 6, generator=generator), torch.randint(3, (n,), generator=generator),
                      torch.randint(2, (n,), generator=generator))
        return RoutingDataset("vectors", ("ant", "bee", "cat"), split, split, {"name": "vectors"}, ("left", "right"))

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        return vector_tree(k_cpt_input)


def vector_factory(**kwargs) -> VectorTask:
    return VectorTask(**kwargs)


register_task("tests/Vectors-v0", VectorTask, k_cpt=1e-3)


def steps(env, seed, actions):
    """Observations of ``env`` reset with ``seed`` and stepped with ``actions`` (restarting at ends)."""
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for action in actions:
        obs, _, terminated, _, _ = env.step(action)
        seen.append(obs)
        if terminated:
            obs, _ = env.reset()
            seen.append(obs)
    return np.stack(seen)


def test_equal_seeds_give_equal_nets_and_observations():
    actions = [2, 0, 1, 2, 1, 0, 2, 0]
    a = gym.make("tests/Vectors-v0", train=False)
    b = gym.make("tests/Vectors-v0", train=False)
    assert np.array_equal(steps(a, 123, actions), steps(b, 123, actions))
    other = gym.make("tests/Vectors-v0", train=False, seed=1)
    assert not np.allclose(steps(a, 123, actions), steps(other, 123, actions)), "the seed must reach the net"


def test_a_tasks_net_reads_its_exits_confidence_when_asked():
    task = VectorTask()
    plain, reading = task.make_net(seed=4), task.make_net(seed=4, exit_confidence=True)
    assert reading.exit_confidence and not plain.exit_confidence
    same = zip(plain.nodes["root"].transform.parameters(), reading.nodes["root"].transform.parameters())
    assert all(torch.equal(a, b) for a, b in same), "the same seed builds the same transforms"
    for junction in plain.junctions:
        exits = sum(plain.nodes[sink].is_leaf for sink in plain.nodes[junction].sinks)
        widths = [n.nodes[junction].router.layers[0].in_features for n in (plain, reading)]
        assert widths[1] == widths[0] + exits


def test_the_paper_env_ids_are_seeded_too():
    from test_env import tiny_dataset

    dataset = tiny_dataset()
    a = gym.make("routing_rl/CIFAR2Routing-v0", dataset=dataset, train=False)
    b = gym.make("routing_rl/CIFAR2Routing-v0", dataset=dataset, train=False)
    assert np.array_equal(steps(a, 123, [1] * 6), steps(b, 123, [1] * 6))


def test_made_envs_share_one_task_and_load_its_data_once():
    LOADS.clear()
    a = gym.make("tests/Vectors-v0", examples=17)
    b = gym.make("tests/Vectors-v0", examples=17)
    assert a.unwrapped.traffic.task is b.unwrapped.traffic.task
    assert len(LOADS) == 1 and len(a.unwrapped.traffic.split) == 17
    assert a.unwrapped.net is not b.unwrapped.net, "separate gym.make calls train separate nets"


def test_task_keywords_pass_through_and_unknown_ones_are_named():
    env = gym.make("tests/Vectors-v0", examples=11)
    assert len(env.unwrapped.traffic.split) == 11
    with pytest.raises(TypeError, match="does not take these keywords.*colour"):
        gym.make("tests/Vectors-v0", colour="red")


def test_no_task_is_an_error_not_the_hybrid_data():
    with pytest.raises(ValueError, match="no task to route"):
        RoutingEnv()
    with pytest.raises(ValueError, match="no task to route"):
        RoutingSB3VecEnv(2)


def test_sb3_vec_env_make_honours_the_registration():
    vec = RoutingSB3VecEnv.make("tests/Vectors-v0", num_envs=3, examples=9, train=False)
    assert isinstance(vec.traffic.task, VectorTask) and len(vec.traffic.split) == 9
    assert list(vec.traffic.k_cpt_model.values) == [1e-3], "the registered k_cpt"
    assert RoutingVecEnv is RoutingSB3VecEnv, "the README's name stays importable"
    gym.register("tests/VectorFactory-v0", entry_point=lambda **kw: RoutingEnv(task=vector_factory, **kw))
    made = RoutingSB3VecEnv.make("tests/VectorFactory-v0", num_envs=4, examples=5, train=False)
    assert made.num_envs == 4 and len(made.traffic.split) == 5, "a factory entry point is called, with its keywords"
    gym.register("tests/NotRouting-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    with pytest.raises(TypeError, match="not a RoutingEnv"):
        RoutingSB3VecEnv.make("tests/NotRouting-v0", num_envs=2)


def test_module_colon_id_imports_the_registering_module(tmp_path, monkeypatch):
    (tmp_path / "plugin_vectors.py").write_text(
        "from routing_rl.envs import register_task\n"
        "register_task('plugin/Vectors-v0', 'test_tasks:VectorTask')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    task, env_kwargs = task_from_env("plugin_vectors:plugin/Vectors-v0", examples=7)
    assert isinstance(task, VectorTask) and task.examples_per_split == 7
    with pytest.raises(ValueError, match="unknown env 'nothing/Here-v0'"):
        task_from_env("nothing/Here-v0")
    with pytest.raises(ValueError, match="cannot import 'no_such_module'"):
        task_from_env("no_such_module:plugin/Vectors-v0")


def test_sync_make_vec_sub_envs_share_one_net_and_trainer():
    envs = gym.make_vec("tests/Vectors-v0", num_envs=3, vectorization_mode="sync")
    nets = {id(env.unwrapped.net) for env in envs.envs}
    trainers = {id(env.unwrapped.trainer) for env in envs.envs}
    assert len(nets) == 1 and len(trainers) == 1
    batched = gym.make_vec("tests/Vectors-v0", num_envs=3)
    assert isinstance(batched, RoutingGymVectorEnv)
    assert gym.make("tests/Vectors-v0").unwrapped.net is not gym.make("tests/Vectors-v0").unwrapped.net


def test_infos_and_evaluation_carry_the_tasks_names():
    env = gym.make("tests/Vectors-v0", train=False)
    _, info = env.reset(seed=0)
    assert info["source"] in ("left", "right")
    task = make_task(VectorTask)
    result = evaluate(env.unwrapped.net, task.dataset().test, 1e-3, classes=task.classes, sources=task.sources)
    leaf = next(iter(result["leaves"].values()))
    assert set(leaf["by_class"]) == {"ant", "bee", "cat"} and set(leaf["by_source"]) == {"left", "right"}


BAD_ACTIONS = [0.7, float("nan"), None, "1", np.array([1, 1]), 2**63, 3, -1, True, [[1, 2]]]


@pytest.mark.parametrize("action", BAD_ACTIONS, ids=repr)
def test_invalid_actions_raise_a_clear_error(action):
    env = gym.make("tests/Vectors-v0", train=False).unwrapped
    obs, _ = env.reset(seed=0)
    with pytest.raises(ValueError, match="integer action|action .* at junction"):
        env.step(action)
    after, *_ = env.step(0)  # the env is unchanged and still usable
    assert after is not None


def test_whole_floats_and_numpy_integers_are_actions():
    env = gym.make("tests/Vectors-v0", train=False).unwrapped
    env.reset(seed=0)
    assert env.step(np.int64(0))[2]
    env.reset(seed=0)
    assert env.step(0.0)[2]


def test_vector_actions_are_checked_too():
    vec = RoutingSB3VecEnv.make("tests/Vectors-v0", num_envs=3, train=False)
    vec.reset()
    for bad in ([0, 0], [0.5, 0, 0], [0, None, 0], np.full(3, np.nan)):
        with pytest.raises(ValueError):
            vec.step(np.array(bad, dtype=object) if None in list(np.ravel(bad)) else np.array(bad))
    vec.step(np.zeros(3, dtype=np.int64))


def test_action_masks_follow_each_slots_junction():
    vec = RoutingSB3VecEnv.make("tests/Vectors-v0", num_envs=6, train=False, seed=0)
    vec.reset()
    assert vec.action_masks().tolist() == [[True] * 3] * 6, "everyone starts at the 3-way root"
    vec.step(np.full(6, 2))  # everyone to the 2-way fork
    assert vec.action_masks().tolist() == [[True, True, False]] * 6
    assert [m.tolist() for m in vec.env_method("action_masks")] == [[True, True, False]] * 6
    with pytest.raises(ValueError, match="action 2 at junction 'fork'"):
        vec.step(np.full(6, 2))


def test_maskable_ppo_trains_on_the_tree_without_a_wrapper():
    sb3_contrib = pytest.importorskip("sb3_contrib")
    from stable_baselines3.common.vec_env import VecMonitor

    env = VecMonitor(RoutingSB3VecEnv.make("tests/Vectors-v0", num_envs=4, train=False, seed=0))
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0)
    model.learn(128)  # raises if any sampled action were invalid at its junction
    assert model.num_timesteps >= 128


def test_plug_in_envs_pass_the_env_checkers():
    # the checkers step with unmasked random actions: past the fork's last sink they must clip
    env = gym.make("tests/Vectors-v0", train=False, clip_actions=True)
    gym_check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(RoutingEnv(task=VectorTask, train=False, clip_actions=True))


class ClipTask(VectorTask):
    """Episodes of 3 frames; the memory counts the frames that left at ``leafA``, and the net
    reads it as a 7th feature."""

    def load_dataset(self) -> RoutingDataset:
        generator = torch.Generator().manual_seed(1)
        clips = Split(torch.randn(10, 3, 6, generator=generator), torch.randint(3, (10, 3), generator=generator),
                      torch.zeros(10, dtype=torch.long))
        return RoutingDataset("clips", ("ant", "bee", "cat"), clips, clips, {}, ("synthetic",))

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        return vector_tree(k_cpt_input, features=7)

    def initial_memory(self, inputs):
        return torch.zeros(len(inputs), 1)

    def net_input(self, inputs, memory):
        return torch.cat([inputs, memory], dim=1)

    def carry(self, memory, inputs, logits, leaf):
        return memory + (leaf == 0).unsqueeze(1).float()


def test_episodes_of_frames_carry_memory_from_one_frame_to_the_next():
    env = RoutingEnv(task=ClipTask, k_cpt=0.0, joint=JointTraining(batch_size=1000))  # records, never updates
    obs, info = env.reset(seed=0)
    frames, read, total = [], [], 0.0
    for action in [0, 0, 0]:  # three frames, each straight to leafA
        read.append(env.traffic.images[0, 6].item())  # the memory feature of the frame's net input
        obs, reward, terminated, _, info = env.step(action)
        frames.append(info["frame"])
        total += reward
    assert frames == [0, 1, 2] and terminated
    assert read == [0.0, 1.0, 2.0], "each frame's input carries the count of earlier frames at leafA"
    clip = env.traffic.split.labels[env.traffic.example[0]]
    assert env.traffic.label[0] == clip[2]
    assert total < 0  # three cross-entropies
    assert make_task(ClipTask).examples(env.traffic.split) is env.traffic.split  # episodes stay episodes


register_task("tests/Clips-v0", ClipTask)


def test_the_paper_learners_train_a_plug_in_task_clip_by_clip(tmp_path):
    """A task that carries memory trains through episodes by default: every batch is the
    next frame of clips in flight, its input built from the memory the net's routing left."""
    from routing_rl.app.runs import train
    from routing_rl.training.config import make_config

    seen = []
    original = ClipTask.net_input
    ClipTask.net_input = lambda self, inputs, memory: seen.append(memory.clone()) or original(self, inputs, memory)
    try:
        config = make_config("smoke", archs=ClipTask.archs, env="tests/Clips-v0", agent="actor", arch="tree", k_cpt=0.0,
                             device="cpu", logdir=str(tmp_path), run_name="clips", batch_size=4)
        metrics = train(config)
    finally:
        ClipTask.net_input = original
    assert metrics["test"][0]["examples"] == 30  # 10 clips of 3 frames, every frame judged
    assert any((memory > 0).any() for memory in seen), "frames after the first read the memory carried to them"


def test_vector_envs_end_episodes_of_frames_at_their_last_frame():
    vec = RoutingSB3VecEnv(2, task=ClipTask, train=False, k_cpt=0.0, seed=0)
    vec.reset()
    dones = [vec.step(np.zeros(2, dtype=np.int64))[2].tolist() for _ in range(6)]
    assert dones == [[False, False], [False, False], [True, True]] * 2
    envs = RoutingGymVectorEnv(2, task=ClipTask, train=False, k_cpt=0.0)
    envs.reset(seed=0)
    ended = [envs.step(np.zeros(2, dtype=np.int64))[2].tolist() for _ in range(3)]
    assert ended == [[False, False], [False, False], [True, True]]


def test_a_task_instance_cannot_be_registered():
    with pytest.raises(TypeError, match="not an instance"):
        register_task("tests/Instance-v0", VectorTask())


def test_sweeps_take_a_plug_in_task():
    from routing_rl.app.sweep import sweep_configs

    configs = sweep_configs(["actor", "dqn"], [1e-3], env="tests/Vectors-v0", preset="smoke")
    assert [(c.agent, c.arch, c.env) for c in configs] == [("actor", "tree", "tests/Vectors-v0"),
                                                          ("dqn", "tree", "tests/Vectors-v0")]
    with pytest.raises(ValueError, match="unknown arch 'chain'; choose one of tree"):
        sweep_configs(["actor"], [1e-3], env="tests/Vectors-v0", arch="chain", preset="smoke")


def test_registered_keywords_never_hold_data():
    dataset = make_task(VectorTask).dataset()
    for heavy in (dataset, dataset.train, dataset.train.images, vector_tree()):
        with pytest.raises(TypeError, match="deep-copy on every gym.make"):
            register_task("tests/Heavy-v0", VectorTask, data=heavy)
    assert "tests/Heavy-v0" not in gym.registry


class ThreeNetsTask(VectorTask):
    """The vector data through a tree (3- and 2-way junctions), an exit-or-continue chain, or
    a plain MLP without junctions: a net for every agent."""

    archs = ("tree", "chain", "flat")

    def default_arch(self, agent):
        return {"static": "flat", "threshold": "chain"}.get(agent, "tree")

    def build_net(self, arch, width, k_cpt_input):
        if arch == "tree":
            return vector_tree(k_cpt_input)
        hidden = 8 * width

        def mlp(n_in):
            return torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU())

        if arch == "flat":
            nodes = {"body": Node(mlp(6), ["head"]), "head": Node(torch.nn.Linear(hidden, 3))}
        else:
            nodes = {"first": Node(mlp(6), ["exit1", "second"], Router(hidden, 2, k_cpt_input)),
                     "exit1": Node(torch.nn.Linear(hidden, 3)),
                     "second": Node(mlp(hidden), ["exit2"]),
                     "exit2": Node(torch.nn.Linear(hidden, 3))}
        return RoutedNet(nodes, next(iter(nodes)), (6,), 3, k_cpt_input)


register_task("tests/ThreeNets-v0", ThreeNetsTask, examples=80)


@pytest.mark.parametrize("agent", ["static", "actor", "critic", "optimistic-critic", "threshold", "dqn", "ppo", "a2c"])
def test_every_agent_trains_a_plug_in_task(agent, tmp_path):
    from routing_rl.app.runs import load_run, train
    from routing_rl.training.config import make_config

    config = make_config("smoke", archs=ThreeNetsTask.archs, env="tests/ThreeNets-v0", agent=agent,
                         arch=ThreeNetsTask().default_arch(agent), k_cpt=1e-3, device="cpu", logdir=str(tmp_path),
                         run_name=agent, **({"n_envs": 4} if agent in ("dqn", "ppo", "a2c") else {}))
    metrics = train(config)
    assert metrics["classes"] == ["ant", "bee", "cat"] and metrics["sources"] == ["left", "right"]
    leaves = metrics["test"][0]["leaves"]
    assert sum(leaf["count"] for leaf in leaves.values()) == metrics["test"][0]["examples"] > 0
    assert set(next(iter(leaves.values()))["by_source"]) == {"left", "right"}
    _, task, net = load_run(tmp_path / agent)
    assert isinstance(task, ThreeNetsTask) and net.leaves == list(leaves)
