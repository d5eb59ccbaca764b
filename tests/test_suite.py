"""The task suite: its datasets, the validation split in the test split's mix, the static
frontier, the run summary against it, and the suite command."""

import json
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from synthetic_data import CIFAR_PER_CLASS, MNIST_PER_CLASS

import routing_rl  # noqa: F401  (registers the env ids)
from routing_rl.app.frontier import frontier_accuracy, frontier_margin, static_frontier
from routing_rl.app.report import margin, static_curve
from routing_rl.app import suite
from routing_rl.app.suite import (average, check_tasks, exits_by_source, flat, inference_cost, learner_point, main, suite_table,
                                  threshold_cost)
from routing_rl.app.runs import final_validation_accuracy
from routing_rl.app.summary import STATIC_REFERENCES, best_single_exit, static_line, summary_text
from routing_rl.data import RoutingDataset, Split, load_dataset
from routing_rl.data.containers import composition_counts
from routing_rl.data.datasets import CLASSES, HYBRIDS, harden_digits
from routing_rl.envs.registration import ENV_DATASETS
from routing_rl.training.config import TrainConfig, make_config

REPO = Path(__file__).resolve().parents[1]


# --- the static frontier ---------------------------------------------------------------


def test_frontier_drops_dips_and_points_under_a_chord():
    # static-3 is a dip (worse than static-2), static-5 is worse than static-4,
    # and static-2b lies under the segment from static-1 to static-2
    points = [(1e6, 0.80), (5e6, 0.90), (7e6, 0.85), (9e6, 0.95), (12e6, 0.93), (3e6, 0.82)]
    assert static_frontier(points) == [(1e6, 0.80), (5e6, 0.90), (9e6, 0.95)]
    frontier = static_frontier(points)
    assert frontier_accuracy(frontier, 3e6) == pytest.approx(0.85)  # on the chord, not 0.82
    assert frontier_accuracy(frontier, 7e6) == pytest.approx(0.925)  # not the dip's 0.85
    assert frontier_accuracy(frontier, 12e6) == pytest.approx(0.95)  # flat past the best
    assert frontier_accuracy(frontier, 0.5e6) is None
    assert frontier_accuracy([], 1e6) is None
    assert frontier_margin(frontier, 0.90, 7e6) == pytest.approx(-2.5)


def test_frontier_keeps_the_most_accurate_of_equally_cheap_nets():
    assert static_frontier([(2, 0.7), (2, 0.9), (1, 0.6)]) == [(1, 0.6), (2, 0.9)]


def test_report_judges_against_the_frontier_not_a_line_through_every_net():
    static = [{"series": "static nets", "accuracy": a, "mean_macs": m} for m, a in
              [(1e6, 0.80), (5e6, 0.90), (7e6, 0.85)]]
    curve = static_curve(static)
    assert curve == [(1e6, 0.80), (5e6, 0.90)]
    # static-3's MACs at static-2's accuracy: on the frontier (flat), not 5 points above a dip
    assert margin(curve, {"accuracy": 0.90, "mean_macs": 7e6}) == pytest.approx(0.0)


def fake_run(folder: Path, agent: str, arch: str, accuracy: float, macs: float, dataset: str = "hybrid-even",
             seed: int = 0, leaves: dict | None = None) -> dict:
    leaves = leaves or {"exit1": {"count": 4, "by_source": {"mnist": 4, "cifar": 0}, "macs": int(macs)}}
    metrics = {"run": str(folder), "agent": agent, "arch": arch, "k_cpt": 4e-9, "test_accuracy": accuracy,
               "test_mean_macs": macs, "train_seconds": 1.0, "dataset": {"name": dataset},
               "test": [{"accuracy": accuracy, "mean_macs": macs, "k_cpt": 4e-9, "leaves": leaves}],
               "config": {"agent": agent, "env": "routing_rl/HybridRouting-v0", "dataset": dataset, "preset": "quick",
                          "seed": seed, "policy": None}}
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def test_summary_uses_the_frontier_of_the_static_runs_beside_it(tmp_path):
    fake_run(tmp_path / "static-1", "static", "static-1", 0.70, 1e6)
    fake_run(tmp_path / "static-2", "static", "static-2", 0.80, 3e6)
    fake_run(tmp_path / "static-3", "static", "static-3", 0.75, 5e6)  # a dip: off the frontier
    fake_run(tmp_path / "other-task", "static", "static-3", 0.99, 5e6, dataset="cifar2")
    fake_run(tmp_path / "other-seed", "static", "static-3", 0.99, 5e6, seed=1)
    fake_run(tmp_path / "static-1-again", "static", "static-1", 0.70, 1e6)  # a tie: named once
    actor = fake_run(tmp_path / "actor", "actor", "chain", 0.82, 4e6)
    text = summary_text(actor)
    assert "static frontier (static-1, static-2) at 4.00M MACs: 80.00%, this net +2.00 pts" in text
    assert "the static runs beside this one" in text
    assert "no static net as cheap" in static_line(0.5, 0.5e6, [("static-1", 0.7, 1e6)])


def test_summary_and_suite_set_the_routing_beside_the_cheapest_exit_alone(tmp_path):
    """A learner that sends every image to one exit routed well only if no other exit alone is
    cheaper: the summary and the suite row show the cheapest one."""
    run = fake_run(tmp_path / "critic", "pragmatic-critic", "chain", 0.80, 1e6)
    run["test"][0]["heads_alone"] = {"exit1": {"accuracy": 0.80, "macs": 1_000_000},
                                     "exit2": {"accuracy": 0.90, "macs": 5_000_000}}
    assert best_single_exit(run["test"][0]) == ("exit2", pytest.approx(0.10 + 0.02))
    text = summary_text(run)
    assert "cost of inference 0.2040" in text and "the cheapest exit alone: exit2, 90.00% at 5.00M MACs, 0.1200" in text
    threshold = {"test": [{"budget": 1, "lr": 0.02, "accuracy": 0.9, "mean_macs": 1e6,
                           "validation_accuracy": 0.9, "validation_mean_macs": 1e6}]}
    row = average([learner_point(run, [(1e6, 0.7)], threshold)])
    assert (row["best_single_exit"], row["best_single_exit_cost"]) == ("exit2", pytest.approx(0.12))
    assert "| exit2 0.1200 |" in suite_table({"tasks": {"hybrid": {"rows": [row]}}})
    del run["test"][0]["heads_alone"]  # a run saved before they were measured
    assert best_single_exit(run["test"][0]) is None and "cheapest exit" not in summary_text(run)
    row = average([learner_point(run, [(1e6, 0.7)], threshold)])
    assert row["best_single_exit"] is None and "| — |" in suite_table({"tasks": {"hybrid": {"rows": [row]}}})


def test_summary_falls_back_to_the_static_nets_of_the_runs_preset_on_hybrid_only(tmp_path):
    quick = summary_text(fake_run(tmp_path / "a", "actor", "chain", 0.90, 4.35e6, "hybrid"))
    # quick's frontier between static-1 (85.38%, 1.36M) and static-2 (90.25%, 5.27M): 89.10% at 4.35M
    assert "the task suite's static nets, hybrid, preset quick" in quick and "this net +0.90 pts" in quick
    longer = fake_run(tmp_path / "b", "actor", "chain", 0.90, 4.35e6, "hybrid")
    longer["config"]["preset"] = "cpu-small"  # the reproduction's static-1 (91.18%) and static-2 (93.71%): 93.11% at 4.35M
    assert "the reproduction's static nets" in summary_text(longer) and "this net -3.11 pts" in summary_text(longer)
    longer["config"]["preset"] = "paper"  # no static nets of that schedule to judge it by
    assert "static frontier" not in summary_text(longer)
    assert "static frontier" not in summary_text(fake_run(tmp_path / "c", "actor", "chain", 0.95, 5e6, "cifar10"))


def test_the_static_references_are_the_reproductions_records():
    """The cpu-small frontier a run's summary falls back on is the committed run records' seed 0,
    each static net at the rate its validation chose, so it cannot drift from the reproduction."""
    records = REPO / "docs" / "results" / "runs" / "reproduction-cpu-small"
    for net, accuracy, macs in STATIC_REFERENCES["cpu-small"][1]:
        runs = [json.loads((records / folder / f"static-{net}-k4e-09-s0" / "metrics.json").read_text())
                for folder in ("hybrid-w1", "hybrid-w1-lr0.02")]
        chosen = max(runs, key=final_validation_accuracy)
        assert accuracy == round(chosen["test_accuracy"], 4), net
        assert macs == pytest.approx(chosen["test_mean_macs"], rel=5e-3), net


# --- the suite's datasets --------------------------------------------------------------


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "suite-cache"))


def source_counts(ds: RoutingDataset, split: str) -> tuple[int, int]:
    return tuple(ds.description["source_counts"][split].values())


def test_variants_have_their_documented_composition(tiny_data, cache):
    digits_train, digits_test = MNIST_PER_CLASS["train"] * 5, MNIST_PER_CLASS["test"] * 5
    cifar_train, cifar_test = CIFAR_PER_CLASS["train"] * 5, CIFAR_PER_CLASS["test"] * 5
    built = {name: load_dataset(name, data_dir=tiny_data, download=False) for name in HYBRIDS}
    for name, ds in built.items():
        assert ds.classes == CLASSES[name] and len(ds.classes) == 10
        assert ds.description["rule"]["variant"] == HYBRIDS[name].summary
    assert built["hybrid-swap"].classes == ("5", "6", "7", "8", "9", "bird", "cat", "dog", "ship", "truck")
    assert source_counts(built["hybrid-swap"], "train") == (digits_train, cifar_train)
    # hybrid-even: as many CIFAR training images per class as the digit classes have
    assert source_counts(built["hybrid-even"], "train") == (digits_train, digits_train)
    # hybrid-train-mix: the test split in the training split's ratio (here 1:1), as large as the sources allow
    assert source_counts(built["hybrid-train-mix"], "test") == (cifar_test, cifar_test)
    assert source_counts(built["hybrid"], "test") == (digits_test, cifar_test)
    # hybrid-hard-digits: a share of each digit class for training (at least one), every test digit
    hard = built["hybrid-hard-digits"]
    kept = max(1, round(HYBRIDS["hybrid-hard-digits"].digit_share * MNIST_PER_CLASS["train"]))
    assert 0 < kept < MNIST_PER_CLASS["train"]
    assert source_counts(hard, "train") == (5 * kept, cifar_train)
    assert source_counts(hard, "test") == (digits_test, cifar_test)
    assert "hard_digits" in hard.description["rule"] and "variant" in hard.description["seeds"]


def test_variants_are_deterministic_and_cached_apart(tiny_data, cache):
    first = load_dataset("hybrid-hard-digits", data_dir=tiny_data, download=False)
    again = load_dataset("hybrid-hard-digits", data_dir=tiny_data, download=False)
    plain = load_dataset("hybrid", data_dir=tiny_data, download=False)
    assert torch.equal(first.test.images, again.test.images)
    assert not torch.equal(first.test.images[first.test.source == 0], plain.test.images[plain.test.source == 0])
    assert torch.equal(first.test.images[first.test.source == 1], plain.test.images[plain.test.source == 1])


def test_hard_digits_hide_a_square():
    grey = torch.ones(6, 1, 32, 32)
    hidden = harden_digits(grey, torch.Generator().manual_seed(0))
    changed = (hidden != grey).flatten(1).sum(1)
    assert changed.max() <= 10 * 10 and hidden.min() >= 0 and hidden.max() <= 1


def test_suite_tasks_are_registered_envs_and_unknown_names_are_refused():
    for name in HYBRIDS:
        assert name in ENV_DATASETS.values()
    for env_id, dataset in ENV_DATASETS.items():
        assert gym.spec(env_id).kwargs["dataset"] == dataset
    with pytest.raises(ValueError, match="unknown dataset 'hybrid-easy'"):
        load_dataset("hybrid-easy")
    with pytest.raises(ValueError, match="unknown suite task 'hybrid-easy'"):
        check_tasks(["hybrid", "hybrid-easy"])


# --- validation in the test split's composition ----------------------------------------


def two_source_dataset() -> RoutingDataset:
    """Train: 20 digits (class 0) and 120 photos (class 1); test: 10 and 10."""
    def split(digits: int, photos: int) -> Split:
        labels = torch.tensor([0] * digits + [1] * photos)
        images = torch.arange(len(labels), dtype=torch.float32)[:, None, None, None].expand(-1, 3, 2, 2)
        return Split(images.contiguous(), labels, labels.clone())
    return RoutingDataset("two", ("digit", "photo"), split(20, 120), split(10, 10), {}, ("mnist", "cifar"))


def test_composition_counts_follow_the_test_split():
    train = torch.tensor([0] * 20 + [1] * 120)
    # no cell gives more than 10% of itself: 2 digits, so 2 photos for the test's 1:1
    assert composition_counts(train, torch.tensor([0] * 10 + [1] * 10), 0.1) == {0: 2, 1: 2}
    # a test split in the training mix takes 10% of each cell, as the training-mix split does
    assert composition_counts(train, train, 0.1) == {0: 2, 1: 12}


def test_validation_split_in_the_test_mix_is_stratified_and_keeps_the_rest_for_training():
    ds = two_source_dataset()
    train_part, validation = ds.validation_split(0.1, seed=0, mix="test")
    assert torch.bincount(validation.source).tolist() == [2, 2]
    assert len(train_part) == 140 - 4
    ids = torch.cat([train_part.images[:, 0, 0, 0], validation.images[:, 0, 0, 0]]).long()
    assert sorted(ids.tolist()) == list(range(140))
    again = ds.validation_split(0.1, seed=0, mix="test")[1]
    assert torch.equal(again.images, validation.images)
    _, old = ds.validation_split(0.1, seed=0, mix="train")
    assert torch.bincount(old.source).tolist() == [2, 12]
    with pytest.raises(ValueError, match="unknown validation mix 'even'"):
        ds.validation_split(0.1, mix="even")


def test_config_says_which_validation_mix_and_old_configs_keep_theirs():
    assert make_config("smoke").validation_mix == "test"
    with pytest.raises(ValueError, match="validation_mix"):
        make_config("smoke", validation_mix="half")
    saved = json.loads(TrainConfig().to_json())
    del saved["validation_mix"]  # written before the field existed: it held out the training mix
    assert TrainConfig.from_json(json.dumps(saved)).validation_mix == "train"


# --- the suite's rows -------------------------------------------------------------------


def test_threshold_budget_is_chosen_on_validation_cost():
    threshold = {"test": [
        {"budget": 1, "accuracy": 0.70, "mean_macs": 1e6, "validation_accuracy": 0.70, "validation_mean_macs": 1e6},
        {"budget": 2, "accuracy": 0.95, "mean_macs": 5e6, "validation_accuracy": 0.80, "validation_mean_macs": 5e6},
    ]}
    # at k_cpt 1e-8: validation costs 0.31 vs 0.25 → budget 2, whose test cost is 0.05 + 0.05
    cost, point = threshold_cost(threshold, 1e-8)
    assert point["budget"] == 2 and cost == pytest.approx(inference_cost(0.95, 5e6, 1e-8)) == pytest.approx(0.10)
    # at k_cpt 1e-7: 0.40 vs 0.70 → budget 1
    assert threshold_cost(threshold, 1e-7)[1]["budget"] == 1


def test_rows_average_seeds_and_pool_exits():
    leaves = {"exit1": {"by_source": {"mnist": 3, "cifar": 0}}, "exit2": {"by_source": {"mnist": 1, "cifar": 2}}}
    assert exits_by_source({"leaves": leaves}) == {"mnist": {"exit1": 0.75, "exit2": 0.25}, "cifar": {"exit2": 1.0}}
    points = [{"agent": "actor", "k_cpt": 4e-9, "test_accuracy": a, "mean_macs": 1e6, "vs_frontier": m, "cost": 0.1, "threshold_cost": 0.2,
               "validation_test_gap": None, "exits": {"mnist": {"exit1": 1.0}}} for a, m in ((0.8, 1.0), (0.9, None))]
    row = average(points)
    assert row["test_accuracy"] == pytest.approx(0.85) and row["vs_frontier"] == pytest.approx(1.0)
    assert row["validation_test_gap"] is None and row["exits"] == {"mnist": {"exit1": 1.0}} and row["seeds"] == 2
    assert row["agent"] == "actor"


# --- the command --------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--agent", "actor", "--tasks", "hybrid-easy"], "unknown suite task 'hybrid-easy'"),
    (["--agent", "static"], "the suite trains the static nets itself"),
    (["--agent", "actor", "--set", "iterations"], "--set takes FIELD=VALUE, got 'iterations'"),
    (["--agent", "actor", "--learner-set", "lr"], "--learner-set takes FIELD=VALUE, got 'lr'"),
    (["--agent", "actor", "--learner-set", "seed=3"], "the suite sets seed per run itself; drop it from --learner-set"),
    (["--agent", "actor", "--workers", "2", "--ray"], "with --ray, Ray places the runs"),
    (["--agent", "actor", "--static-lr", "0.1", "auto"], "--static-lr takes learning rates or auto alone"),
])
def test_suite_command_refuses_bad_input_in_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and message in err


def test_static_nets_stop_after_two_in_a_row_no_better_than_the_best_shallower():
    assert not flat([0.80, 0.85, 0.84])
    assert flat([0.80, 0.85, 0.84, 0.85])  # a tie with the best is no better
    assert not flat([0.80, 0.85, 0.84, 0.86])
    assert not flat([])


def test_static_rounds_share_one_sweep_over_tasks_and_seeds(tmp_path, monkeypatch):
    """Round c trains static-c of every (task, seed) still improving, at each of its task's
    learning rates, in one sweep (so workers share them); each net's point is its lr with the
    best validation accuracy; a (task, seed) whose nets stopped improving trains no deeper net."""
    test = {"hybrid": [0.80, 0.85, 0.84, 0.83, 0.9], "cifar2": [0.7, 0.75, 0.8, 0.79, 0.78, 0.9]}
    lr_of = {"hybrid": [0.1], "cifar2": [0.02, 0.1]}
    batches = []

    def fake_sweep(configs, log, **backend):
        batches.append(sorted((c.dataset, c.arch, c.seed, c.run_name.endswith("-lr0.1")) for c in configs))
        assert backend == {"workers": 2}
        dirs = []
        for config in configs:
            run_dir = tmp_path / config.dataset / config.run_name
            run_dir.mkdir(parents=True, exist_ok=True)
            columns = int(config.arch.split("-")[1])
            # cifar2 at lr 0.1: better on validation, 0.05 worse on test
            tweak = 0.05 if config.lr == 0.1 and config.dataset == "cifar2" else 0.0
            metrics = {"test_accuracy": test[config.dataset][columns - 1] - tweak, "config": {"lr": config.lr},
                       "history": [{"evaluations": [{"accuracy": 0.5 + tweak}]}]}
            (run_dir / "metrics.json").write_text(json.dumps(metrics))
            dirs.append(run_dir)
        return dirs

    monkeypatch.setattr(suite, "run_sweep", fake_sweep)
    where = {task: {"dataset": task, "logdir": str(tmp_path / task)} for task in test}
    found = suite.train_static(where, [0, 1], lr_of, "smoke", print, {"workers": 2})
    assert [len(batch) for batch in batches] == [6, 6, 6, 6, 4]  # hybrid flat after 4 nets, cifar2 after 5
    assert batches[0] == [("cifar2", "static-1", 0, False), ("cifar2", "static-1", 0, True),
                          ("cifar2", "static-1", 1, False), ("cifar2", "static-1", 1, True),
                          ("hybrid", "static-1", 0, False), ("hybrid", "static-1", 1, False)]
    assert [m["test_accuracy"] for m in found["hybrid", 1]] == test["hybrid"][:4]
    assert [m["config"]["lr"] for m in found["cifar2", 0]] == [0.1] * 5  # chosen on validation, not on test
    assert [m["test_accuracy"] for m in found["cifar2", 0]] == pytest.approx([a - 0.05 for a in test["cifar2"][:5]])


@pytest.mark.slow
def test_suite_end_to_end_on_tiny_data_then_skips_finished_runs(tiny_data, cache, tmp_path, capsys):
    args = ["--agent", "actor", "critic", "--preset", "smoke", "--tasks", "hybrid-even", "--k-cpts", "4e-9",
            "--static-lr", "0.05", "0.02",
            "--data-dir", str(tiny_data), "--download", "false", "--validation-fraction", "0.4",
            "--iterations", "6", "--set", "eval_every=3", "--learner-set", "exit_confidence=true",
            "--logdir", str(tmp_path / "runs"), "--json", str(tmp_path / "suite.json")]
    assert main([*args, "--workers", "2"]) == 0  # the runs train in two worker processes
    first = capsys.readouterr().out
    results = json.loads((tmp_path / "suite.json").read_text())
    task = results["tasks"]["hybrid-even"]
    row, critic = task["rows"]  # the learners share the task's static nets and threshold
    assert (row["agent"], critic["agent"]) == ("actor", "pragmatic-critic")
    static = task["static"]["0"]
    assert [s["arch"] for s in static][:2] == ["static-1", "static-2"]
    frontier = static_frontier((s["mean_macs"], s["test_accuracy"]) for s in static)
    assert row["vs_frontier"] == pytest.approx(frontier_margin(frontier, row["test_accuracy"], row["mean_macs"]))
    assert row["cost"] == pytest.approx(inference_cost(row["test_accuracy"], row["mean_macs"], 4e-9))
    assert set(row["exits"]) == {"mnist", "cifar"}
    assert np.isclose(sum(row["exits"]["mnist"].values()), 1.0)
    saved_test = json.loads((Path(row["per_seed"][0]["run"]) / "metrics.json").read_text())["test"][0]
    assert len(saved_test["heads_alone"]) == 8
    assert (row["best_single_exit"], row["best_single_exit_cost"]) == best_single_exit(saved_test)
    assert "| hybrid-even | actor | 4e-09 | 1 |" in first and "| hybrid-even | pragmatic-critic | 4e-09 | 1 |" in first
    saved = json.loads((tmp_path / "runs" / "hybrid-even" / "static-static-1-k4e-09-s0" / "config.json").read_text())
    assert (saved["iterations"], saved["eval_every"]) == (6, 3)
    tagged = json.loads((tmp_path / "runs" / "hybrid-even" / "static-static-1-k4e-09-s0-lr0.02" / "config.json").read_text())
    assert (task["static_lr"], saved["lr"], tagged["lr"]) == ([0.05, 0.02], 0.05, 0.02)
    assert {s["lr"] for s in static} <= {0.05, 0.02}
    points = task["threshold"]["0"]  # the threshold at both rates: its budgets each, and its point fitted to the cost
    budgets = [(p["lr"], p["budget"]) for p in points if p["label"].startswith("budget")]
    assert len(budgets) == 6 and sorted(budgets) == sorted((lr, b) for lr in (0.05, 0.02) for b in {b for _, b in budgets})
    assert sorted(p["lr"] for p in points if p["label"].startswith("fitted")) == [0.02, 0.05]
    assert results["overrides"] == {"iterations": 6, "eval_every": 3, "validation_fraction": 0.4}
    assert results["learner_overrides"] == {"exit_confidence": True}  # the learners only: static and threshold refuse it
    learner = json.loads((tmp_path / "runs" / "hybrid-even" / "actor-chain-k4e-09-s0-softmax-exit_confidence=true"
                          / "config.json").read_text())
    assert learner["exit_confidence"] and not saved["exit_confidence"]
    assert main([*args, "--workers", "0"]) == 0
    again = capsys.readouterr().out
    assert "training" not in again and "complete, skipped" in again
    assert json.loads((tmp_path / "suite.json").read_text())["tasks"]["hybrid-even"]["rows"][0]["cost"] == row["cost"]


@pytest.mark.slow
def test_real_suite_tasks_have_the_composition_docs_suite_md_gives(real_data_dir, real_cache_dir):
    """docs/suite.md's table (training / validation / test images per source, seed 0) is what the data builds."""
    from routing_rl.app.suite import SUITE

    rows = {}
    for line in (REPO / "docs" / "suite.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`") and re.fullmatch(r"[\d,]+ / [\d,]+", cells[2]):
            rows[cells[0].strip("`")] = cells[2:]

    def pair(split: Split) -> str:
        digits, photos = torch.bincount(split.source, minlength=2).tolist()
        return f"{digits:,} / {photos:,}"

    assert set(rows) == set(SUITE)
    for name, (train, validation, test, validation_train_mix) in rows.items():
        ds = load_dataset(name, data_dir=real_data_dir, cache_dir=real_cache_dir, download=False)
        train_part, held_out = ds.validation_split(0.1, 0, "test")
        assert [pair(train_part), pair(held_out), pair(ds.test)] == [train, validation, test], name
        assert pair(ds.validation_split(0.1, 0, "train")[1]) == validation_train_mix, name
