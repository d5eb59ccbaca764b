"""routing_rl.app.schedule_check: a schedule trains the static nets when no net still gains a
point of validation accuracy over its last quarter and the deep nets fit their training
batches at least as well as static-3."""

from __future__ import annotations

import pytest
from torch.utils.tensorboard import SummaryWriter

from routing_rl.app.runs import TRAIN_FIT_FIELD
from routing_rl.app.schedule_check import StaticRun, late_rise, schedule_evidence, train_accuracy, validation_curve


def metrics(curve: dict[int, float], test: float = 0.9, lr: float | None = None) -> dict:
    return {"test_accuracy": test, **({"config": {"lr": lr}} if lr else {}),
            "history": [{"iteration": i, "evaluations": [{"accuracy": a}]} for i, a in curve.items()]}


def static_run(tmp_path, columns: int, seed: int, curve: dict[int, float], fit: float, lr: float | None = None) -> StaticRun:
    run_dir = tmp_path / f"static-{columns}-s{seed}"
    with SummaryWriter(str(run_dir)) as writer:
        for step in range(1, 11):  # only the last tenth counts
            writer.add_scalar("charts/train_accuracy", 0.1 if step < 10 else fit, step)
    return StaticRun(f"static-{columns}", seed, metrics(curve, lr=lr), run_dir)


def test_the_rise_is_over_the_last_quarter_of_the_runs_own_evaluations():
    run = metrics({300: 0.50, 600: 0.80, 900: 0.85, 1200: 0.855})
    assert validation_curve(run) == [(300, 50.0), (600, 80.0), (900, 85.0), (1200, 85.5)]
    assert late_rise(run) == pytest.approx(0.5)
    assert late_rise(metrics({400: 0.5, 800: 0.7, 1200: 0.8})) == pytest.approx(10.0)  # 800 is the last at or before 900
    assert late_rise(metrics({1200: 0.8})) is None  # no evaluation before the last quarter
    assert late_rise({"history": []}) is None


def test_the_training_fit_is_the_last_tenth_of_the_logged_steps(tmp_path):
    assert train_accuracy({}, tmp_path / "missing") is None
    run = static_run(tmp_path, 3, 0, {}, 0.97)
    assert train_accuracy(run.run, run.run_dir) == pytest.approx(0.97)


def test_a_recorded_training_fit_is_read_without_the_events(tmp_path):
    run = static_run(tmp_path, 3, 0, {}, 0.97)
    assert train_accuracy({**run.run, TRAIN_FIT_FIELD: 0.5}, run.run_dir) == 0.5  # the record, not the events
    assert train_accuracy({TRAIN_FIT_FIELD: 0.5}, None) == 0.5  # a committed record: no events at all
    assert train_accuracy({TRAIN_FIT_FIELD: None}, run.run_dir) == pytest.approx(0.97)


def test_a_schedule_is_trained_when_no_net_still_learns_and_deep_nets_fit(tmp_path):
    flat = {300: 0.6, 600: 0.8, 900: 0.85, 1200: 0.855}
    runs = [static_run(tmp_path, n, s, flat, fit, lr) for s, lr in ((0, 0.1), (1, 0.02))
            for n, fit in ((3, 0.90), (7, 0.95), (8, 0.96))]
    trained, lines = schedule_evidence(runs)
    assert trained is True and lines[-1].startswith("**Trained at this schedule.**")
    assert "| static-8 | 0, 1 | 0.1, 0.02 | 300: 60.0, 600: 80.0, 900: 85.0, 1,200: 85.5 | +0.50 | 96.00 | 90.00 |" in lines


def test_a_net_still_learning_or_a_deep_net_under_fitting_fails_the_schedule(tmp_path):
    flat, rising = {300: 0.6, 600: 0.8, 900: 0.85, 1200: 0.855}, {300: 0.3, 600: 0.5, 900: 0.6, 1200: 0.7}
    runs = [static_run(tmp_path / "a", 3, 0, flat, 0.9), static_run(tmp_path / "a", 8, 0, rising, 0.95)]
    trained, lines = schedule_evidence(runs)
    assert trained is False and "static-8 still gain 1 point or more" in lines[-1]
    runs = [static_run(tmp_path / "b", 3, 0, flat, 0.9), static_run(tmp_path / "b", 8, 0, flat, 0.6)]
    trained, lines = schedule_evidence(runs)
    assert trained is False and "static-8 under-fits" in lines[-1]


def test_too_few_runs_cannot_judge_a_schedule(tmp_path):
    assert schedule_evidence([]) == (None, ["No static net has finished."])
    trained, lines = schedule_evidence([static_run(tmp_path, 3, 0, {300: 0.6, 1200: 0.7}, 0.9)])
    assert trained is None and "Not enough runs to judge the schedule" in lines[-1]
