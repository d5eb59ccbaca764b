"""Issue 48 on the reports: figures, the latency report and the end-of-run summary compare only
runs tested on the same examples and trained on the same schedule, draw a run given twice
once, and refuse NaN, mistyped or too deeply nested metrics and malformed latency profiles in
one line (tiny synthetic data)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from test_safety_tools import runs  # noqa: F401  (finished smoke runs: static and actor on hybrid, an actor on MNIST)

from routing_rl.app import figures, latency
from routing_rl.app.cli import main as train_main
from routing_rl.app.summary import summary_text
from routing_rl.data import cache
from routing_rl.nets.multiscale import build
from routing_rl.training.config import PRESET_VALUES
from routing_rl.training.cost import read_profile


def variant(runs: Path, tmp_path: Path, source: str, name: str, edit) -> Path:
    """A copy of the run ``source`` as ``tmp_path/name``, its metrics changed by ``edit(metrics)``
    (a string returned is written as the file's text)."""
    folder = tmp_path / name
    shutil.copytree(runs / source, folder)
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["run"] = str(folder)
    text = edit(metrics)
    (folder / "metrics.json").write_text(text if isinstance(text, str) else json.dumps(metrics))
    return folder


def judged_on(examples: int, seed: int = 0):
    def edit(metrics):
        metrics["config"].update(eval_examples=examples, seed=seed)
    return edit


# --- item 18: one test set per curve, a run once, no NaN ----------------------------------


def test_runs_tested_on_different_examples_are_drawn_apart(runs, tmp_path, capsys):
    size = json.loads((runs / "actor" / "metrics.json").read_text())["dataset"]["sizes"]["test"]
    few = variant(runs, tmp_path, "actor", "actor-few", judged_on(size - 5))
    few_static = variant(runs, tmp_path, "static", "static-few", judged_on(size - 5))
    other_seed = variant(runs, tmp_path, "actor", "actor-few-seed-1", judged_on(size - 5, seed=1))
    every = variant(runs, tmp_path, "actor", "actor-every", judged_on(size + 100))  # a limit above the size: all
    out = tmp_path / "figures"
    figures.write_figures([runs / "static", runs / "actor", every, few_static, few, other_seed], out)
    groups = {"hybrid-test-all": [runs / "static", runs / "actor", every],
              f"hybrid-test-{size - 5}-seed-0": [few_static, few], f"hybrid-test-{size - 5}-seed-1": [other_seed]}
    assert sorted(p.name for p in out.iterdir()) == sorted(groups)
    for name, members in groups.items():
        drawn = {row["run"] for row in csv.DictReader((out / name / "accuracy_macs.csv").open())}
        assert drawn == {str(run) for run in members}
    report = (out / f"hybrid-test-{size - 5}-seed-0" / "report.md").read_text()
    assert report.startswith(f"Task: routing_rl/HybridRouting-v0 on hybrid (30 train / {size - 5} of {size} test examples, seed 0).")
    assert (out / "hybrid-test-all" / "report.md").read_text().startswith(
        f"Task: routing_rl/HybridRouting-v0 on hybrid (30 train / {size} test examples).")
    (note,) = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("note: runs of one task judged on different test examples are drawn apart: hybrid-test-all (")


def test_the_latency_report_matches_points_within_one_test_set(runs, tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(runs / "cache"))
    few = variant(runs, tmp_path, "actor", "actor-few", judged_on(10))
    assert len({name for name in figures.by_task([json.loads((d / "metrics.json").read_text())
                                                  for d in (runs / "actor", few)])}) == 2
    points = latency.measure([runs / "actor", few], [2], examples=4, repeats=1)
    assert [p["task"] for p in points] == ["hybrid-test-all", "hybrid-test-10-seed-0"]


def test_a_run_given_twice_is_drawn_once(runs, tmp_path, monkeypatch):
    out = tmp_path / "figures"
    monkeypatch.setenv(cache.CACHE_ENV, str(runs / "cache"))
    monkeypatch.chdir(runs)
    figures.write_figures([runs / "static", runs / "actor", Path("actor"), runs / "static" / ".." / "actor"], out)
    lines = (out / "accuracy_macs.csv").read_text().splitlines()
    assert sum(str(runs / "actor") in line for line in lines) == 1 and len(lines) == 3
    assert len(latency.measure([runs / "actor", Path("actor")], [2], examples=4, repeats=1)) == 1


# --- item 26: metrics the figures cannot draw, profiles that are not profiles -------------


def nested(metrics):
    return "[" * 100_000 + "]" * 100_000


def first_leaf(metrics) -> dict:
    return next(iter(metrics["test"][0]["leaves"].values()))


BAD_METRICS = [
    ("nested", nested, "cannot be read as JSON (it nests too deeply to be read)"),
    ("nan", lambda m: m["test"][0].update(accuracy=float("nan")), ": its test[0] accuracy is NaN, not a finite number"),
    ("inf-macs", lambda m: m["test"][0].update(mean_macs=float("inf")), ": its test[0] mean_macs is Infinity, not a finite number"),
    ("text-k-cpt", lambda m: m["test"][0].update(k_cpt="abc"), ': its test[0] k_cpt is "abc", not a finite number'),
    ("agent", lambda m: m.update(agent=5), ": its agent is 5, not a name"),
    ("run", lambda m: m.update(run=5), ": its run is 5, not a name"),
    ("label", lambda m: m["test"][0].update(label=7), ": its test[0] label is not a string"),
    ("fraction", lambda m: first_leaf(m).update(fraction="0.5"), ': its test leaf exit1 fraction is "0.5", not a finite number'),
    ("leaves", lambda m: m["test"][0].update(leaves=[]), ": its structure, routing or history cannot be drawn (AttributeError"),
    ("history", lambda m: m.update(history="abc"), ": its structure, routing or history cannot be drawn (TypeError"),
    ("structure", lambda m: m["structure"].update(nodes=5), ": its structure lacks nodes or junctions"),
    ("sources", lambda m: m.update(sources=[1, 2]), ": its sources are not a list of names"),
]


@pytest.mark.parametrize("name, edit, message", BAD_METRICS, ids=[case[0] for case in BAD_METRICS])
@pytest.mark.parametrize("tool", ["figures", "latency_report"])
def test_metrics_that_cannot_be_drawn_are_one_line(tool, name, edit, message, runs, tmp_path, capsys):
    bad = variant(runs, tmp_path, "actor", name, edit)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        if tool == "figures":
            figures.main([str(runs / "static"), str(bad), "--out", str(out)], prog="figures.py")
        else:
            latency.report_main([str(runs / "actor"), str(bad), "--batch-sizes", "2", "--examples", "4", "--repeats", "1",
                                 "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"{tool}.py: error: {bad / 'metrics.json'}")
    assert message in err and err.strip().endswith("resume the run to write it again, or leave the run out")
    assert not out.exists(), "nothing is written before every run is read"


def a_profile() -> dict:
    net = build("chain", 1, 10)
    return {"seconds": {name: {"transform": 1e-4, "router": 0.0} for name in net.order}, "batch_size": 4}


BAD_PROFILES = [
    ("a-list", "[1, 2]", 'it is not a latency profile (no "seconds" of each node)'),
    ("seconds-a-number", '{"seconds": 5}', 'it is not a latency profile (no "seconds" of each node)'),
    ("node-a-number", '{"seconds": {"col1": 5}}', "its times of node 'col1' are 5, not a transform and a router time"),
    ("text-time", '{"seconds": {"col1": {"transform": "abc", "router": 0}}}',
     "its transform time of node 'col1' is 'abc', not a number of seconds >= 0"),
    ("nan-time", '{"seconds": {"col1": {"transform": NaN, "router": 0}}}',
     "its transform time of node 'col1' is nan, not a number of seconds >= 0"),
    ("negative-time", '{"seconds": {"col1": {"transform": 1e-4, "router": -1}}}',
     "its router time of node 'col1' is -1, not a number of seconds >= 0"),
    ("no-router", '{"profile": {"seconds": {"col1": {"transform": 1e-4}}}}',
     "its router time of node 'col1' is None, not a number of seconds >= 0"),
    ("nested", "[" * 100_000 + "]" * 100_000, "it nests too deeply to be read"),
    ("not-utf8", b"\xff\xfe{", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
]


@pytest.mark.parametrize("name, content, message", BAD_PROFILES, ids=[case[0] for case in BAD_PROFILES])
def test_a_malformed_latency_profile_is_one_line(name, content, message, tmp_path):
    path = tmp_path / f"{name}.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError) as refused:
        read_profile(path)
    assert str(refused.value) == f"cannot read the latency profile {path}: {message}; write one with experiments/profile_latency.py"
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"profile": a_profile()}))
    assert read_profile(good) == a_profile()


def test_training_with_a_malformed_latency_profile_is_one_line(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(runs / "cache"))
    profile = tmp_path / "profile.json"
    profile.write_text('{"seconds": {"col1": {"transform": "abc", "router": 0}}}')
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--preset", "smoke", "--iterations", "1", "--data-dir", str(runs / "data"), "--download", "false",
                    "--validation-fraction", "0.4", "--logdir", str(tmp_path), "--run-name", "latency", "--cost", "latency",
                    "--latency-profile", str(profile)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and "its transform time of node 'col1' is 'abc'" in err[0]


# --- item 19: the summary judges a run against static nets of its own schedule ------------


def fake_run(folder: Path, agent: str, arch: str, accuracy: float, macs: float, **config) -> dict:
    """A finished run's metrics.json on hybrid at preset quick, ``config`` over its schedule."""
    config = {"agent": agent, "env": "routing_rl/HybridRouting-v0", "dataset": None, "preset": "quick", "seed": 0,
              "policy": None, "train_examples": None, "eval_examples": None, "validation_fraction": 0.1,
              "validation_mix": "test", **PRESET_VALUES["quick"], **config}
    metrics = {"run": str(folder), "agent": agent, "arch": arch, "k_cpt": 4e-9, "test_accuracy": accuracy,
               "test_mean_macs": macs, "train_seconds": 1.0,
               "dataset": {"name": "hybrid", "sizes": {"train": 28_000, "test": 2052}},
               "test": [{"accuracy": accuracy, "mean_macs": macs, "k_cpt": 4e-9, "leaves": {}}], "config": config}
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def test_the_summary_never_judges_a_run_against_a_longer_schedules_static_nets(tmp_path):
    fake_run(tmp_path / "static-1", "static", "static-1", 0.90, 1e6, iterations=200)
    fake_run(tmp_path / "static-2", "static", "static-2", 0.95, 5e6, iterations=200)
    actor = fake_run(tmp_path / "actor", "actor", "chain", 0.80, 2e6, iterations=20)
    text = summary_text(actor)
    assert "static frontier" not in text, "nothing of its schedule beside it, and quick's nets trained 1,200 iterations"
    fake_run(tmp_path / "static-1-short", "static", "static-1", 0.70, 1e6, iterations=20)
    fake_run(tmp_path / "static-2-short", "static", "static-2", 0.85, 5e6, iterations=20)
    assert "static frontier (static-1, static-2) at 2.00M MACs: 73.75%, this net +6.25 pts" in summary_text(actor)


@pytest.mark.parametrize("field, value", [("batch_size", 64), ("train_examples", 1000), ("eval_examples", 64),
                                          ("validation_fraction", 0.2), ("preset", "cpu-small")])
def test_the_summary_compares_only_the_same_schedule_and_test_examples(field, value, tmp_path):
    fake_run(tmp_path / "static-1", "static", "static-1", 0.70, 1e6, **{field: value})
    fake_run(tmp_path / "static-2", "static", "static-2", 0.85, 5e6, **{field: value})
    actor = fake_run(tmp_path / "actor", "actor", "chain", 0.80, 2e6)
    assert "the task suite's static nets" in summary_text(actor), "the preset's own nets, not those beside it"
    actor["config"][field] = value
    text = summary_text(actor)
    assert "static frontier (static-1, static-2) at 2.00M MACs: 73.75%" in text and "the static runs beside" in text


def test_the_presets_static_nets_judge_only_runs_of_that_schedule(tmp_path):
    actor = fake_run(tmp_path / "actor", "actor", "chain", 0.90, 4.35e6)
    assert "the task suite's static nets, hybrid, preset quick" in summary_text(actor)
    for field, value in (("iterations", 20), ("eval_examples", 64), ("train_examples", 500), ("batch_size", 32)):
        changed = {**actor, "config": {**actor["config"], field: value}}
        assert "static frontier" not in summary_text(changed), field
    whole = {**actor, "config": {**actor["config"], "eval_examples": 5000}}  # a limit above the test split: all of it
    assert "the task suite's static nets" in summary_text(whole)


def test_a_static_run_with_a_nan_accuracy_is_no_reference(tmp_path, capsys):
    fake_run(tmp_path / "static-1", "static", "static-1", float("nan"), 1e6)
    actor = fake_run(tmp_path / "actor", "actor", "chain", 0.80, 2e6)
    text = summary_text(actor)
    assert "nan%" not in text and "the task suite's static nets" in text
    (warning,) = capsys.readouterr().err.strip().splitlines()
    assert warning.startswith(f"warning: {tmp_path / 'static-1' / 'metrics.json'} is not a run's metrics (its test accuracy")
