"""Video routing through train_agent.py and the video report, on tiny synthetic clips."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
from test_video import tiny_images

from routing_rl.app.cli import main
from routing_rl.app.trainer import fit
from routing_rl.app.video import video_report
from routing_rl.agents.registry import make_learner
from routing_rl.envs import register_task
from routing_rl.envs.video_task import VideoTask
from routing_rl.training.config import make_config

ENV = "test/TinyVideo-v0"
FRAMES, TRAIN_CLIPS, TEST_CLIPS = 4, 40, 6


def tiny_video_task() -> VideoTask:
    return VideoTask(frames=FRAMES, train_clips=TRAIN_CLIPS, test_clips=TEST_CLIPS, images=tiny_images())


if ENV not in gym.registry:
    register_task(ENV, tiny_video_task, arch="video", k_cpt=4e-9)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("video-runs")
    common = ["--env", ENV, "--preset", "smoke", "--logdir", str(logdir), "--device", "cpu", "--eval-every", "2"]
    agents = {
        "critic": ["--agent", "critic", "--policy", "eps-greedy", "--execution", "full", "--iterations", "4"],
        "actor": ["--agent", "actor", "--iterations", "4"],
        "dqn": ["--agent", "dqn", "--iterations", "200", "--eval-every", "100", "--checkpoint-every", "100"],
    }
    for name, args in agents.items():
        assert main([*common, *args, "--run-name", name]) == 0
    return logdir


@pytest.mark.parametrize("agent", ["critic", "actor", "dqn"])
def test_every_agent_trains_on_clips_and_is_judged_clip_by_clip(runs, agent, capsys):
    metrics = json.loads((runs / agent / "metrics.json").read_text())
    test = metrics["test"][0]
    assert metrics["arch"] == "video"
    assert test["examples"] == TEST_CLIPS * FRAMES and test["clips"] == TEST_CLIPS
    assert len(test["accuracy_by_frame"]) == FRAMES
    assert test["mean_cost"] == pytest.approx(test["mean_c_err"] + 4e-9 * test["mean_macs"])
    assert set(test["leaves"]) == {"reuse", "exit1", "exit3"}


def test_the_report_compares_every_run_with_every_baseline(runs, tmp_path):
    written = video_report([runs / "critic", runs / "dqn"], tmp_path)
    assert [p.name for p in written] == ["video.json", "video.md", "video.png"]
    summaries = json.loads((tmp_path / "video.json").read_text())
    for summary in summaries:
        policies = summary["policies"]
        assert set(policies) == {f"learned ({summary['agent']})", "always-deep", "always-cheap",
                                 "difference-threshold", "oracle"}
        assert policies["always-deep"]["leaves"]["exit3"] == 1.0 and policies["always-cheap"]["leaves"]["exit1"] == 1.0
        assert policies["oracle"]["mean_macs"] < policies["always-deep"]["mean_macs"]
        assert set(summary["target"]) >= {"met", "lower_cost_than_every_baseline", "cost_above_oracle"}
    table = (tmp_path / "video.md").read_text()
    assert table.count("| critic |") == 5 and "always-deep" in table


def test_the_report_charges_every_policy_the_error_cost_asked_for(runs, tmp_path):
    video_report([runs / "critic"], tmp_path, error_cost="zero_one")
    summary = json.loads((tmp_path / "video.json").read_text())[0]
    assert summary["error_cost"] == "zero_one"
    for row in summary["policies"].values():
        assert row["mean_c_err"] == pytest.approx(1 - row["accuracy"])
        assert row["mean_cost"] == pytest.approx(1 - row["accuracy"] + 4e-9 * row["mean_macs"])
    assert "error cost zero_one" in (tmp_path / "video.md").read_text()
    with pytest.raises(ValueError, match="error_cost must be one of"):
        video_report([runs / "critic"], tmp_path, error_cost="hinge")


def test_unfinished_runs_are_named(tmp_path):
    with pytest.raises(ValueError, match="have not finished"):
        video_report([tmp_path], tmp_path / "out")


def test_fit_trains_on_clips_in_flight_and_needs_the_task():
    task = tiny_video_task()
    dataset = task.dataset()
    config = make_config("smoke", task.archs, agent="critic", policy="eps-greedy", execution="full", arch="video",
                         iterations=3, eval_every=3, device="cpu")
    learner = make_learner(config, task, torch.device("cpu"))
    before = {k: v.clone() for k, v in learner.net.state_dict().items()}
    state = fit(learner, dataset.train, dataset.test, config, task=task)
    assert state.iteration == 3 and state.history[0]["evaluations"][0]["clips"] == TEST_CLIPS
    assert any(not torch.equal(before[k], v) for k, v in learner.net.state_dict().items())
    with pytest.raises(ValueError, match="pass task="):
        fit(learner, dataset.train, dataset.test, config)
