"""The benchmarks still run: tiny sizes, so only their plumbing and bookkeeping are checked."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_execution  # noqa: E402


def test_execution_benchmark_routes_as_designed():
    result = bench_execution.run(torch.device("cpu"), batch_size=64, repeats=1)
    exits = result["exit_fraction_by_leaf"]
    assert exits["exit1"] == pytest.approx(0.5, abs=0.05)
    assert exits["exit3"] == pytest.approx(0.25, abs=0.05)
    assert exits["exit8"] == pytest.approx(0.25, abs=0.05)
    assert result["mac_ratio"] > 2
    assert {"ideal_speedup", "dynamic_speedup", "node_seconds_full", "node_seconds_dynamic"} <= set(result)


def test_video_benchmark_times_every_policy_on_the_same_clips(monkeypatch):
    import bench_video
    from test_video import tiny_images

    from routing_rl.envs.video_task import VideoTask

    monkeypatch.delenv(bench_video.RUN_ENV, raising=False)
    task = VideoTask(frames=4, train_clips=2, test_clips=3, images=tiny_images())
    result = bench_video.run(torch.device("cpu"), task=task, clips=3, repeats=1)
    assert result["frames"] == 12 and result["learned_policy"] == "oracle"
    assert result["mac_ratio_vs_deep"] > 1
    assert result["frames_per_second_always_deep"] > 0 and result["speedup_vs_deep"] > 0
