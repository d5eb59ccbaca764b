"""Video routing: the per-frame net's MACs, its memory, episodes and the baseline policies."""

from __future__ import annotations

import pytest
import torch

from routing_rl.agents import video as policies
from routing_rl.core.costs import error_cost
from routing_rl.core.execution import route
from routing_rl.core.macs import MacCounter
from routing_rl.data import SOURCES, RoutingDataset, Split
from routing_rl.envs.video_task import VideoTask
from routing_rl.nets.multiscale import column
from routing_rl.nets.video import AGE_CAP, LEAVES, ChangeDetector, MemoryLayout, pack, thumbnail
from routing_rl.training.episodes import EpisodeSampler, run_episodes
from routing_rl.training.evaluate import evaluate

CLASSES = 10


def tiny_images(n_train: int = 40, n_test: int = 20) -> RoutingDataset:
    generator = torch.Generator().manual_seed(0)

    def split(n: int) -> Split:
        return Split(torch.rand(n, 3, 32, 32, generator=generator), torch.arange(n) % CLASSES, torch.arange(n) % 2)

    return RoutingDataset("tiny", tuple(str(c) for c in range(CLASSES)), split(n_train), split(n_test), {}, SOURCES)


@pytest.fixture(scope="module")
def task() -> VideoTask:
    return VideoTask(frames=6, train_clips=12, test_clips=6, images=tiny_images())


@pytest.fixture(scope="module")
def net(task):
    return task.make_net("video", seed=0).eval()


def test_leaves_and_path_macs(net):
    assert tuple(net.leaves) == LEAVES
    first = column(1)
    with MacCounter(first) as cheap_column:
        first(torch.zeros(1, 3, 32, 32))
    macs = dict(zip(net.leaves, net.leaf_macs.tolist()))
    detector = net.macs["detect"] + net.router_macs["detect"]
    assert macs["reuse"] == detector  # reuse adds nothing to the detector and its router
    assert macs["exit1"] == detector + net.macs["col1"] + net.router_macs["col1"] + net.macs["exit1"]
    assert net.macs["col1"] == cheap_column.macs
    assert macs["exit3"] > 5 * macs["exit1"] > 5 * 100 * macs["reuse"]


def test_the_change_detector_declares_its_macs(net):
    detector = ChangeDetector(MemoryLayout(CLASSES))
    assert net.macs["detect"] == detector.extra_macs(None, None) > 3 * 32 * 32
    assert net.router_macs["detect"] > 0


def test_reuse_returns_the_memory_and_computing_replaces_it(net):
    layout = MemoryLayout(CLASSES)
    frames = torch.rand(4, 3, 32, 32)
    memory = layout.initial(4)
    memory[:, :CLASSES] = torch.randn(4, CLASSES)
    memory[:, -1] = 3
    always = {0: policies.fixed(0, 0), 1: policies.ALWAYS_CHEAP, 2: policies.ALWAYS_DEEP}
    reused = route(net, pack(frames, memory), always[0])
    assert torch.equal(reused.logits, memory[:, :CLASSES]) and (reused.leaf == 0).all()
    after = layout.carry(memory, frames, reused.logits, reused.leaf == 0)
    assert torch.equal(after[:, :-1], memory[:, :-1]) and (after[:, -1] == 4).all()
    deep = route(net, pack(frames, memory), always[2])
    after = layout.carry(memory, frames, deep.logits, deep.leaf == 0)
    assert torch.equal(after[:, :CLASSES], deep.logits)
    assert torch.allclose(after[:, layout.thumbnail], thumbnail(frames).flatten(1))
    assert (after[:, -1] == 0).all()
    assert (layout.carry(after, frames, deep.logits, torch.ones(4, dtype=torch.bool))[:, -1] == 1).all()
    assert (layout.initial(2)[:, -1] == AGE_CAP).all()


def test_the_detector_sees_the_difference_from_the_key_frame(net):
    layout = MemoryLayout(CLASSES)
    frames = torch.rand(3, 3, 32, 32)
    memory = layout.carry(layout.initial(3), frames, torch.zeros(3, CLASSES), torch.zeros(3, dtype=torch.bool))
    same = net.nodes["detect"].transform(pack(frames, memory))["descriptor"]
    other = net.nodes["detect"].transform(pack(frames.flip(0), memory))["descriptor"]
    mean = policies.MEAN_DIFFERENCE
    assert torch.allclose(same[:, :mean + 1], torch.zeros(3, mean + 1), atol=1e-6)
    assert (other[[0, 2], mean] > 0.05).all()


def test_episodes_cost_frame_by_frame(task, net):
    clips = task.clips["test"]
    split = task.dataset().test
    k_cpt = 4e-9
    deep = run_episodes(net, task, split, policies.ALWAYS_DEEP, k_cpt)
    assert deep.leaf.shape == (len(clips), clips.length) and (deep.leaf == 2).all()
    assert (deep.macs == net.leaf_macs[2]).all()
    # every frame is classified on its own, as the deep path classifies it alone
    frames = split.images.flatten(0, 1)
    memory = task.initial_memory(frames)
    logits = route(net, pack(frames, memory), policies.ALWAYS_DEEP).logits
    assert torch.allclose(deep.c_err.flatten(), error_cost(logits, split.labels.flatten()), atol=1e-5)
    oracle = run_episodes(net, task, split, policies.Oracle(clips.event), k_cpt)
    assert torch.equal(oracle.leaf == 0, ~clips.event)
    summary = evaluate(net, split, k_cpt, policies.Oracle(clips.event), task=task)
    expected = (oracle.c_err.double() + k_cpt * oracle.macs.double()).mean()
    assert summary["mean_cost"] == pytest.approx(float(expected))
    assert summary["mean_macs"] < float(net.leaf_macs[2])
    assert len(summary["accuracy_by_frame"]) == clips.length
    assert summary["examples"] == clips.labels.numel()
    assert summary["leaves"]["reuse"]["fraction"] == pytest.approx(float((~clips.event).double().mean()))
    assert summary["accuracy"] == pytest.approx(float(oracle.correct.double().mean()))


def test_reused_frames_repeat_the_key_frames_prediction(task, net):
    clips, split = task.clips["test"], task.dataset().test
    oracle = policies.Oracle(clips.event)
    run = run_episodes(net, task, split, oracle)
    predictions = []
    memory = task.initial_memory(split.images[:, 0])
    for t in range(clips.length):
        routed = route(net, task.net_input(split.images[:, t], memory), oracle.at(torch.arange(len(clips)), t))
        memory = task.carry(memory, split.images[:, t], routed.logits, routed.leaf)
        predictions.append(routed.pred)
    predictions = torch.stack(predictions, 1)
    for c in range(len(clips)):
        for t in range(1, clips.length):
            if not clips.event[c, t]:
                assert predictions[c, t] == predictions[c, t - 1]
    assert torch.equal(run.correct, predictions == split.labels)


def test_threshold_tuning_picks_the_cheapest_validated_threshold(task, net):
    split = task.dataset().train
    best, tried = policies.tune_threshold(net, task, split, 4e-9, torch.tensor([1e-6, 0.05, 10.0]))
    assert best in (1e-6, 0.05, 10.0) and len(tried) == 3
    assert min(t["mean_cost"] for t in tried) == next(t["mean_cost"] for t in tried if t["threshold"] == best)
    # a threshold above every difference reuses after the first frame; 1e-6 recomputes almost always
    assert tried[2]["mean_macs"] < tried[0]["mean_macs"]


def test_threshold_tuning_charges_the_error_cost_it_is_given(task, net):
    split = task.dataset().train
    _, tried = policies.tune_threshold(net, task, split, 4e-9, torch.tensor([1e-6, 10.0]), error_kind="zero_one")
    for entry in tried:
        assert entry["mean_cost"] == pytest.approx(1 - entry["accuracy"] + 4e-9 * entry["mean_macs"])
    _, cross_entropy = policies.tune_threshold(net, task, split, 4e-9, torch.tensor([1e-6, 10.0]))
    assert [t["accuracy"] for t in cross_entropy] == [t["accuracy"] for t in tried]
    assert [t["mean_cost"] for t in cross_entropy] != [t["mean_cost"] for t in tried]


def test_episode_sampler_carries_the_nets_own_memory(task):
    net = task.make_net("video", seed=1)
    split = task.dataset().train
    sampler = EpisodeSampler(task, split, batch_size=8, seed=0)
    first_clips, first_frames = sampler.clip.clone(), sampler.frame.clone()
    batch = sampler.next(net)
    assert torch.equal(batch.labels, split.labels[first_clips, first_frames])
    assert torch.equal(batch.images[:, :3], split.images[first_clips, first_frames])
    assert batch.images.shape == (8, 4, 32, 32) and batch.labels.shape == (8,)
    assert net.training  # restored after the inference routing
    # with argmax routers at their zero start every frame reuses: the memory only ages
    assert (sampler.memory[:, -1] == AGE_CAP).all()
    assert torch.equal((sampler.frame - first_frames) % split.frames, torch.ones(8, dtype=torch.long))
    again = EpisodeSampler(task, split, batch_size=8, seed=0)
    assert torch.equal(again.next(net).images, batch.images)


def test_every_frame_keeps_its_own_source(task, net):
    """A clip may cut from a digit to a photo: the split, the evaluation's per-source counts,
    the sampler's batches and the env's infos follow each frame's own source."""
    clips, split = task.clips["test"], task.dataset().test
    assert torch.equal(split.source, clips.source)
    assert (clips.source != clips.source[:, :1]).any()  # the tiny clips do mix sources
    summary = evaluate(net, split, 4e-9, policies.ALWAYS_DEEP, task=task)
    counted = {name: sum(leaf["by_source"][name] for leaf in summary["leaves"].values()) for name in task.sources}
    assert counted == {name: int((clips.source == i).sum()) for i, name in enumerate(task.sources)}
    sampler = EpisodeSampler(task, task.dataset().train, batch_size=8, seed=0)
    where = sampler.clip.clone(), sampler.frame.clone()
    assert torch.equal(sampler.next(net).source, task.dataset().train.source[where])
    one_per_clip = Split(split.images, split.labels, split.source[:, 0])
    assert torch.equal(one_per_clip.source, split.source[:, :1].expand(-1, split.frames))


def make_env(task, **kwargs):
    import gymnasium as gym

    return gym.make("routing_rl/VideoRouting-v0", task=task, train=False, **kwargs)


def test_the_env_passes_gymnasiums_and_sb3s_checkers(task):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make_env(task)
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped)


def test_a_clips_rewards_are_its_frames_costs(task):
    import numpy as np

    k_cpt = 4e-9
    env = make_env(task, k_cpt=k_cpt)
    net = env.unwrapped.net
    macs = dict(zip(net.leaves, net.leaf_macs.tolist()))
    rng = np.random.default_rng(0)
    for seed in range(3):
        env.reset(seed=seed)
        total, frames, expected, done = 0.0, 0, 0.0, False
        while not done:
            _, reward, done, truncated, info = env.step(int(rng.integers(2)))
            assert not truncated
            total += reward
            if "leaf" in info:  # a frame reached its leaf
                expected -= info["c_err"] + k_cpt * macs[info["leaf"]]
                assert info["frame"] == frames
                frames += 1
        assert frames == task.clips["train"].length
        assert total == pytest.approx(expected, rel=1e-6)


def test_reusing_costs_only_the_change_detector(task):
    env = make_env(task, k_cpt=1e-6)
    net = env.unwrapped.net
    env.reset(seed=0)
    env.step(1), env.step(1)  # the first frame: compute, deep
    _, reward, _, _, info = env.step(0)  # the second frame: reuse
    assert info["leaf"] == "reuse"
    detector = net.macs["detect"] + net.router_macs["detect"]
    assert reward == pytest.approx(-info["c_err"] - 1e-6 * detector)
    assert detector < 0.005 * float(net.leaf_macs[1])


def test_vector_env_slots_play_whole_clips_while_others_restart(task):
    import numpy as np

    from routing_rl.envs import RoutingSB3VecEnv

    env = RoutingSB3VecEnv(4, seed=0, task=task, train=False, k_cpt=4e-9)
    env.reset()
    frames_seen = np.zeros(4, dtype=int)
    finished_clips = 0
    rng = np.random.default_rng(0)
    for _ in range(60):
        _, _, dones, infos = env.step(rng.integers(2, size=4))
        for slot, info in enumerate(infos):
            if "leaf" in info:
                assert info["frame"] == frames_seen[slot]
                frames_seen[slot] += 1
            if dones[slot]:
                assert frames_seen[slot] == task.clips["train"].length
                frames_seen[slot] = 0
                finished_clips += 1
    assert finished_clips >= 4
