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
