import pytest

from routing_rl.app.frontier import frontier_accuracy
from routing_rl.app.report import exits_by_source, margin, markdown_report, static_curve, targets


def point(series, accuracy, macs, run="r", k_cpt=None, label=""):
    return {"series": series, "run": run, "arch": "chain", "k_cpt": k_cpt, "label": label,
            "accuracy": accuracy, "mean_macs": macs}


STATIC = [point("static nets", 0.80, 1e6, "s1"), point("static nets", 0.90, 3e6, "s2"), point("static nets", 0.92, 7e6, "s3")]


def test_static_curve_is_linear_between_neighbours_and_flat_past_the_last():
    curve = static_curve(STATIC + [point("actor", 0.99, 2e6)])
    assert curve == [(1e6, 0.80), (3e6, 0.90), (7e6, 0.92)]
    assert frontier_accuracy(curve, 2e6) == pytest.approx(0.85)
    assert frontier_accuracy(curve, 5e6) == pytest.approx(0.91)
    assert frontier_accuracy(curve, 9e6) == pytest.approx(0.92)
    assert frontier_accuracy(curve, 0.5e6) is None


def test_margin_is_in_accuracy_points():
    curve = static_curve(STATIC)
    assert margin(curve, point("actor", 0.87, 2e6)) == pytest.approx(2.0)
    assert margin(curve, point("actor", 0.84, 2e6)) == pytest.approx(-1.0)


def test_targets_need_every_actor_above_and_one_cheap_match():
    above = [point("actor", 0.918, 3.5e6, "a1"), point("actor", 0.86, 2e6, "a2")]
    goal = targets(STATIC + above)
    assert goal["all_above"] and goal["cheap_match"] == ["a1"]
    goal = targets(STATIC + above + [point("actor", 0.84, 2e6, "a3")])
    assert not goal["all_above"]
    dynamic = point("actor, dynamic k_cpt", 0.917, 3.4e6, "d", k_cpt=8e-9)
    assert targets(STATIC + above + [dynamic])["cheap_match"] == ["a1", "d@k_cpt=8e-09"]
    with pytest.raises(ValueError, match="no static nets"):
        targets(above)


def test_report_counts_exits_by_source():
    leaves = {"exit1": {"count": 3, "by_source": {"mnist": 3, "cifar": 0}},
              "exit2": {"count": 0, "by_source": {"mnist": 0, "cifar": 0}},
              "exit3": {"count": 2, "by_source": {"mnist": 0, "cifar": 2}}}
    run = {"run": "a1", "structure": {"junctions": ["j1"]}, "test": [{"k_cpt": 4e-9, "leaves": leaves}]}
    assert exits_by_source(run) == [("k_cpt=4e-09", [("exit1", {"mnist": 3, "cifar": 0}), ("exit3", {"mnist": 0, "cifar": 2})])]
    text = markdown_report([run], STATIC + [point("actor", 0.918, 3.5e6, "a1", 4e-9)])
    assert "exit1 3 / 0, exit3 0 / 2" in text
    assert "| actor | a1 | k_cpt=4e-09 | 91.80% | 3.50M | +1.55 |" in text


def test_report_names_a_tasks_own_sources():
    leaves = {"exit1": {"count": 4, "by_source": {"left": 1, "right": 3}}}
    run = {"run": "v", "structure": {"junctions": ["j1"]}, "sources": ["left", "right"],
           "test": [{"k_cpt": 1e-3, "leaves": leaves}]}
    text = markdown_report([run], [point("actor", 0.5, 1e3, "v", 1e-3)])
    assert "(left / right)" in text and "exit1 1 / 3" in text
