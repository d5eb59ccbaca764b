"""The benchmarks still run: tiny sizes, so only their plumbing and bookkeeping are checked."""

import sys
from pathlib import Path

import pytest
import torch

from routing_rl.training import acceleration

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_execution  # noqa: E402


def test_execution_benchmark_routes_as_designed():
    result = bench_execution.run(torch.device("cpu"), batch_sizes=(1, 64), repeats=1, min_examples=4,
                                 examples=64, allocator_default=False)
    exits = result["exit_fraction_by_leaf"]
    assert exits["exit1"] == pytest.approx(0.5, abs=0.05)
    assert exits["exit3"] == pytest.approx(0.25, abs=0.05)
    assert exits["exit8"] == pytest.approx(0.25, abs=0.05)
    rows = result["by_batch_size"]
    assert set(rows) == {1, 64} and rows[1]["examples"] == 4 and rows[64]["examples"] == 64
    assert rows[64]["mac_ratio"] > 2
    assert {"b1_dynamic_over_perfect", "b64_full_to_perfect", "batch1_dynamic_chain_over_static8"} <= set(result)


def test_backbone_benchmark_times_the_resnet_three_ways_and_its_ideal_computes_each_exit():
    import bench_backbone

    result = bench_backbone.run(torch.device("cpu"), batch_sizes=(1, 8), repeats=1, min_examples=2, examples=16)
    exits = result["exit_fraction_by_leaf"]
    assert exits["exit1"] == pytest.approx(0.5, abs=0.1) and exits["exit3"] == pytest.approx(0.25, abs=0.1)
    row = result["by_batch_size"][8]
    assert row["mac_ratio"] > 1.3 and row["full_us_per_image"] > 0 and "b8_saving_on_clock" in result
    assert bench_backbone.saving_on_clock(1.5, 1.5) == pytest.approx(1.0)
    assert bench_backbone.saving_on_clock(1.2, 2.0) == pytest.approx((1 - 1 / 1.2) / 0.5)
    net, ideal, x = bench_backbone.setup(torch.device("cpu"), 16, width=1)
    routed = bench_backbone.dynamic(net, x)
    for leaf_index in torch.unique(routed.leaf).tolist():
        here = routed.leaf == leaf_index
        with torch.no_grad():
            logits = ideal[leaf_index](x[here]).logits[net.leaves[leaf_index]]
        torch.testing.assert_close(logits, routed.logits[here], rtol=1e-4, atol=1e-5)


def test_perfect_skipping_nets_compute_the_chain_exits():
    torch.manual_seed(0)
    net, plain_nets, x = bench_execution.setup(torch.device("cpu"), 16)
    routed = bench_execution.dynamic(net, x)
    for leaf_index in torch.unique(routed.leaf).tolist():
        here = routed.leaf == leaf_index
        with torch.no_grad():
            logits = plain_nets[leaf_index](x[here]).logits[net.leaves[leaf_index]]
        torch.testing.assert_close(logits, routed.logits[here])


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


def test_step_profile_counts_the_operators_of_a_static_step(monkeypatch):
    import bench_learners
    import profile_step

    monkeypatch.setattr(bench_learners, "BATCH_SIZE", 4)
    result = profile_step.profile(torch.device("cpu"), "static8", steps=1, compile=False, rows=5)
    # static-8: 8 columns of convolutions, each run forward and backward
    assert "convolution_backward" in result["table"]
    assert result["aten_calls_per_step"] > 2 * 32
    assert result["step_seconds_synchronised"] > 0 and result["step_seconds_free_running"] > 0
    assert result["device_seconds_per_step"] is None


def test_vecenv_benchmark_reports_its_ratio_against_the_bound_at_the_slots_batches():
    import bench_vecenv

    result = bench_vecenv.run(torch.device("cpu"), num_envs=16, rounds=1, steps=2, single_steps=2)
    assert 0 < result["vecenv_mean_macs_per_step"] < bench_vecenv.chain().full_macs
    assert result["mac_mix_bound"] > 0 and result["mac_mix_bound_at_slot_batches"] > 0
    assert result["vecenv_over_bound"] == pytest.approx(
        result["vecenv_throughput_ratio"] / result["mac_mix_bound_at_slot_batches"])
    assert result["target"] == "vecenv_throughput_ratio >= 0.6"


def test_latency_benchmark_prices_every_column_against_its_macs():
    import bench_latency

    result = bench_latency.run(torch.device("cpu"), batch_sizes=(2,), repeats=1, warmup=0)
    ratios = [result[f"b2_col{k}_time_over_macs"] for k in range(1, 9)]
    assert all(r > 0 for r in ratios)
    # MAC-equivalents share out the full net's MACs by time: weighted by MACs, they average 1
    net = bench_latency.chain()
    macs = [net.macs[f"col{k}"] + net.router_macs[f"col{k}"] + net.macs[f"exit{k}"] for k in range(1, 9)]
    assert sum(r * m for r, m in zip(ratios, macs)) == pytest.approx(net.full_macs, rel=1e-6)
    assert 0 < result["b2_exit1_mac_share"] < 0.1 and result["b2_us_per_example"] > 0


def test_an_acceleration_that_fails_is_reported_and_the_others_still_timed(monkeypatch):
    import bench_learners

    monkeypatch.setattr(bench_learners, "BATCH_SIZE", 4)
    monkeypatch.setattr(bench_learners, "ACCELERATED_CASES", {"static1": dict(agent="static", arch="static-1")})
    build = bench_learners._accelerated_learner

    def failing_autocast(device, mode, overrides):
        if mode == "bf16_autocast":
            raise RuntimeError("no bf16 here")
        return build(device, mode, overrides)

    monkeypatch.setattr(bench_learners, "_accelerated_learner", failing_autocast)
    out = bench_learners.accelerated_comparison(torch.device("cpu"), repeats=1, modes=("channels_last", "bf16_autocast"))
    assert out["static1_bf16_autocast_error"] == "RuntimeError: no bf16 here"
    assert "static1_bf16_autocast_speedup" not in out and out["static1_channels_last_speedup"] > 0


def test_the_cpu_step_comparison_bounds_every_fp32_speedup_by_the_convolutions_share(monkeypatch):
    import bench_learners

    monkeypatch.setattr(bench_learners, "BATCH_SIZE", 4)
    monkeypatch.setattr(bench_learners, "ACCELERATED_CASES", {"static2": dict(agent="static", arch="static-2")})
    out = bench_learners.accelerated_comparison(torch.device("cpu"), repeats=1, modes=("channels_last",))
    # two columns: convolutions forward and backward take a real part of a step, not all of it
    assert 0 < out["static2_convolution_share"] < 1
    assert out["static2_speedup_bound"] == pytest.approx(1 / out["static2_convolution_share"])
    learner = bench_learners._learner(torch.device("cpu"), agent="static", arch="static-1")
    assert 0 < bench_learners.convolution_share(learner, torch.device("cpu"), steps=1) < 1


def test_the_sure_router_benchmark_steps_one_actor_with_subnormals_kept_and_flushed(monkeypatch):
    import bench_learners

    monkeypatch.setattr(bench_learners, "BATCH_SIZE", 4)
    try:
        out = bench_learners.sure_routers_flush(torch.device("cpu"), repeats=1)
        if out["actor_sure_routers_flush_speedup"] is None:
            pytest.skip("this CPU cannot flush subnormals to zero")
        assert (torch.tensor([1e-30]) * torch.tensor([1e-9])).item() == 0, "left flushed, as a run leaves it"
    finally:
        torch.set_flush_denormal(False)
    kept, flushed = out["actor_sure_routers_kept_step_seconds"], out["actor_sure_routers_flushed_step_seconds"]
    assert kept > 0 and flushed > 0
    assert out["actor_sure_routers_flush_speedup"] == pytest.approx(kept / flushed)


def test_the_step_comparison_measures_each_mode_against_eager_and_eager_against_fp64(monkeypatch):
    import bench_learners

    monkeypatch.setattr(bench_learners, "BATCH_SIZE", 4)
    monkeypatch.setattr(bench_learners, "ACCELERATED_CASES", {"static1": dict(agent="static", arch="static-1")})
    monkeypatch.setattr(acceleration, "native_bf16", lambda device: True)  # emulated where it is not: slow, same numbers
    out = bench_learners.accelerated_comparison(torch.device("cpu"), repeats=1, modes=("channels_last", "bf16_autocast"))
    # a weight layout is float rounding; bf16 arithmetic is more (with its 8-bit mantissa)
    assert 0 < out["static1_fp64_update_difference"] < 1e-3
    assert out["static1_channels_last_update_difference"] < 1e-3
    assert out["static1_bf16_autocast_update_difference"] > 10 * out["static1_fp64_update_difference"]


def test_a_failing_benchmark_is_reported_and_the_others_still_written(monkeypatch, tmp_path, capsys):
    import json
    from types import SimpleNamespace

    import run

    def broken(device):
        raise FileNotFoundError("no data here")

    monkeypatch.setattr(run, "BENCHMARKS", {"broken": "bench_broken", "fine": "bench_fine"})
    modules = {"bench_broken": type("M", (), {"run": staticmethod(broken)}),
               "bench_fine": type("M", (), {"run": staticmethod(lambda device: {"ratio": 0.5})})}
    monkeypatch.setattr(run, "importlib", SimpleNamespace(import_module=modules.__getitem__))
    out = tmp_path / "bench.json"
    assert run.main(["--json", str(out)]) == 1
    written = json.loads(out.read_text())
    assert written["broken"]["error"] == "FileNotFoundError: no data here"
    assert written["fine"]["ratio"] == 0.5
    assert "failed: broken" in capsys.readouterr().err
