"""experiments/reproduce_paper.py: the verdict rule, the static frontier, the figures' runs
(a dry run lists them and their budget without training), and the whole pipeline — sweep,
figures, docs/reproduction.md — on one smoke figure."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest
from synthetic_data import write_cifar_pickles, write_mnist_idx

from routing_rl.app import reproduce
from routing_rl.app.reproduce import FAILS, HOLDS, OPEN, Point, Results, Series, verdict


def test_a_verdict_needs_the_mean_two_standard_errors_past_the_claim():
    assert verdict([1.0, 1.2, 0.9])[0] == HOLDS
    assert verdict([-1.0, -1.2, -0.9])[0] == FAILS
    assert verdict([1.0, -0.8, 0.5])[0] == OPEN
    assert verdict([2.0]) == (OPEN, "+2.00 from one seed; a verdict needs two or more")
    assert verdict([])[0] == OPEN
    assert verdict([-1.0, -1.1], "below")[0] == HOLDS
    assert verdict([0.1, -0.2, 0.05], "within", 1.0)[0] == HOLDS
    assert verdict([-3.0, -3.2, -2.9], "within", 1.0)[0] == FAILS
    assert verdict([-0.2, 0.1, 0.0], "not below", 1.0)[0] == HOLDS
    assert verdict([-3.0, -3.2, -2.9], "not below", 1.0)[0] == FAILS


def test_combined_verdict_holds_only_when_every_part_holds():
    assert reproduce.combine([("a", HOLDS, ""), ("b", HOLDS, "")])[0] == HOLDS
    assert reproduce.combine([("a", HOLDS, ""), ("b", OPEN, "")])[0] == OPEN
    assert reproduce.combine([("a", OPEN, ""), ("b", FAILS, "")])[0] == FAILS


def point(series, seed, k_cpt, accuracy, macs, arch="chain"):
    return Point(series, seed, k_cpt, accuracy, macs, {"arch": arch, "history": []}, {})


def test_margin_is_over_the_best_static_net_at_no_more_macs_of_the_same_data_and_width():
    static, actor = Series("static nets", "static"), Series("actor", "actor", {"k_dec": 0.0})
    other = Series("static nets", "static", {"width": 2})
    results = Results([point(static, 0, None, 0.80, 1e6, "static-1"), point(static, 0, None, 0.90, 5e6, "static-2"),
                       point(static, 0, None, 0.85, 9e6, "static-3"), point(other, 0, None, 0.99, 1e6, "static-1"),
                       point(actor, 0, 4e-9, 0.88, 6e6), point(actor, 0, 0.0, 0.70, 0.5e6)], [])
    assert actor.folder == "hybrid-w1-kdec0.0" and actor.base == static.base == "hybrid-w1"
    margins = [results.frontier_margin(p) for p in results.of(actor)]
    assert margins[0] == pytest.approx(-2.0) and margins[1] is None
    assert results.mean_margin(actor, 0) == pytest.approx(-2.0)


def test_a_seeds_margin_waits_for_all_its_runs_and_its_static_nets(tmp_path):
    static, actor = Series("static nets", "static"), Series("actor", "actor")

    def planned(series, seed, name, accuracy, macs, arch="chain", k_cpt=4e-9, finished=True):
        config = reproduce.TrainConfig(logdir=str(tmp_path), run_name=name, seed=seed, arch=arch, k_cpt=k_cpt)
        if finished:
            (tmp_path / name).mkdir()
            run = {"arch": arch, "history": [], "test": [{"accuracy": accuracy, "mean_macs": macs}]}
            (tmp_path / name / "metrics.json").write_text(json.dumps(run))
        return series, config

    runs = [planned(static, seed, f"s1-{seed}", 0.80, 1e6, "static-1") for seed in (0, 1, 2)]
    runs += [planned(static, 0, "s2-0", 0.90, 5e6, "static-2"), planned(static, 1, "s2-1", 0.90, 5e6, "static-2"),
             planned(static, 2, "s2-2", 0.90, 5e6, "static-2", finished=False)]  # seed 2's frontier is incomplete
    runs += [planned(actor, 0, "a-k4-0", 0.92, 6e6), planned(actor, 0, "a-k0-0", 0.95, 6e6, k_cpt=0.0),
             planned(actor, 1, "a-k4-1", 0.92, 6e6), planned(actor, 1, "a-k0-1", 0.95, 6e6, k_cpt=0.0, finished=False),
             planned(actor, 2, "a-k4-2", 0.92, 6e6), planned(actor, 2, "a-k0-2", 0.95, 6e6, k_cpt=0.0)]
    results = reproduce.read_results(runs, k_cpts=(0.0, 4e-9))
    assert len(results.missing) == 2
    assert results.mean_margin(actor, 0) == pytest.approx(3.5)
    assert results.mean_margin(actor, 1) is None  # its k_cpt 0 run is unfinished
    assert results.mean_margin(actor, 2) is None  # static-2 of its seed is unfinished: its frontier would read 80%
    finished = [p for p in results.points if p.series == actor and p.seed == 1]
    assert results.frontier_margin(finished[0]) == pytest.approx(2.0)  # the finished point still shows in the tables
    assert results.of(static, 2) == [] and len(results.of(static, 1)) == 2  # the overfitting claim waits for seed 2 too


def test_a_static_net_at_several_learning_rates_is_the_one_best_on_validation_per_seed():
    static, actor = Series("static nets", "static"), Series("actor", "actor")
    tagged = Series("static nets", "static", tag="-lr0.02")
    assert (static.folder, tagged.folder) == ("hybrid-w1", "hybrid-w1-lr0.02")

    def net(series, seed, validation, test, arch="static-1"):
        run = {"arch": arch, "history": [{"evaluations": [{"accuracy": validation}]}]}
        return Point(series, seed, None, test, 1e6, run, {})
    points = [net(static, 0, 0.70, 0.90), net(tagged, 0, 0.80, 0.60),  # seed 0: lr 0.02 wins on validation
              net(static, 1, 0.80, 0.85), net(tagged, 1, 0.80, 0.95),  # seed 1: a tie goes to the first listed
              net(tagged, 0, 0.50, 0.50, "static-2"), point(actor, 0, 4e-9, 0.9, 2e6)]
    chosen = reproduce.best_static_lr(points)
    statics = {(p.run["arch"], p.seed): p for p in chosen if p.series.agent == "static"}
    assert {key: p.accuracy for key, p in statics.items()} == {("static-1", 0): 0.60, ("static-1", 1): 0.85,
                                                               ("static-2", 0): 0.50}
    assert all(p.series == static for p in statics.values())  # the claims read them as one series
    assert sum(p.series == actor for p in chosen) == 1


def test_deep_static_nets_overfit_only_if_they_fit_the_training_batches_as_well(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    def run(name, seed, test, train):
        run_dir = tmp_path / f"{name}-s{seed}"
        with SummaryWriter(str(run_dir)) as writer:
            for step in range(1, 11):  # only the last tenth counts
                writer.add_scalar("charts/train_accuracy", 0.0 if step < 10 else train, step)
        return Point(Series("static nets", "static"), seed, None, test, 1e6, {"arch": name, "history": []}, {}, run_dir)
    overfit = reproduce.figures()["hybrid"].claims[1].measure
    deep_fits = Results([run("static-3", s, 0.90, 0.90) for s in (0, 1)] + [run("static-8", s, 0.80 + s / 100, 0.99)
                                                                           for s in (0, 1)], [])
    outcome = overfit(deep_fits)
    assert outcome.verdict == HOLDS, outcome.reason
    assert [(name, part) for name, part, _ in outcome.parts] == [
        ("less accurate on test than the best of static-1..6", HOLDS), ("while fitting the training batches at least as well", HOLDS)]
    deep_underfits = Results([run("static-3", s, 0.90, 0.90) for s in (0, 1)] + [run("static-8", s, 0.80 + s / 100, 0.50)
                                                                                for s in (0, 1)], [])
    outcome = overfit(deep_underfits)
    assert outcome.verdict == FAILS and "fitting the training batches at least as well: does not hold" in outcome.reason


def test_claim_one_has_a_verdict_per_learner_and_the_papers_words():
    static = Series("static nets", "static")
    learners = [Series(label, agent) for label, agent in
                (("actor", "actor"), ("pragmatic critic", "pragmatic-critic"), ("optimistic critic", "optimistic-critic"))]
    learners.append(Series("optimistic critic, every head on every image", "optimistic-critic", {"head_weight": 1.0}))
    points = [point(static, seed, None, 0.90, 5e6, "static-2") for seed in (0, 1, 2)]
    points += [point(s, seed, 4e-9, 0.92 + (i == 2) * -0.05 + seed / 1000, 5e6) for i, s in enumerate(learners)
               for seed in (0, 1, 2)]
    claim = reproduce.figures()["hybrid"].claims[0]
    outcome = claim.measure(Results(points, []))
    assert outcome.verdict == FAILS
    assert [(name, part) for name, part, _ in outcome.parts] == [
        ("actor", HOLDS), ("pragmatic critic", HOLDS), ("optimistic critic", FAILS),
        ("optimistic critic, every head on every image", HOLDS)]
    assert learners[3].folder == "hybrid-w1-headweight1.0", "its own runs, not the paper's critic's"
    assert claim.paper.startswith("“For a given computational budget") and "Sec. 5.1" in claim.paper
    assert all(c.paper for f in reproduce.figures().values() for c in f.claims)


def test_the_dynamic_k_cpt_claim_needs_its_macs_to_fall_at_every_step_and_its_accuracy_within_a_point():
    actor, dynamic = Series("actor", "actor"), Series("actor, dynamic k_cpt", "actor", dynamic=True)
    claim = reproduce.figures(k_cpts=(0.0, 4e-9, 1.6e-8, 6.4e-8))["hybrid"].claims[3]

    def outcome(dynamic_macs):
        points = [point(actor, seed, k, 0.90, 5e6) for seed in (0, 1) for k in (4e-9, 1.6e-8)]
        points += [point(dynamic, seed, k, 0.90 - seed / 1000, m) for seed in (0, 1)
                   for k, m in zip((0.0, 4e-9, 1.6e-8, 6.4e-8), dynamic_macs[seed])]
        return claim.measure(Results(points, []))

    falling = outcome([(9e6, 7e6, 4e6, 2e6), (9e6, 8e6, 4e6, 4e6)])  # an equal step is not a rise
    assert falling.verdict == HOLDS and [part for _, part, _ in falling.parts] == [HOLDS, HOLDS]
    ignored = outcome([(9e6, 7e6, 4e6, 2e6), (3e6, 3e6, 3.1e6, 3e6)])  # seed 1 reads its k_cpt the wrong way once
    assert ignored.verdict == FAILS and ignored.parts[0][1:] == (FAILS, "steps where it rose, per seed: 0, 1")
    assert ignored.parts[1][1] == HOLDS, "accuracy alone would have passed"


def test_the_dynamic_k_cpt_claim_also_shows_its_gap_to_the_fixed_actors_frontier_at_its_own_macs():
    actor, dynamic = Series("actor", "actor"), Series("actor, dynamic k_cpt", "actor", dynamic=True)
    claim = reproduce.figures(k_cpts=(0.0, 4e-9, 1.6e-8, 6.4e-8))["hybrid"].claims[3]
    points = [point(actor, seed, k, a, m) for seed in (0, 1)
              for k, a, m in ((4e-9, 0.95, 10e6), (1.6e-8, 0.93, 6e6), (6.4e-8, 0.90, 3e6))]
    # at 4e-9 it buys less accuracy with fewer MACs, half a point under the line joining the fixed actors;
    # at 1.6e-8 it spends fewer MACs than any fixed actor, where their frontier says nothing
    points += [point(dynamic, seed, k, a, m) for seed in (0, 1)
               for k, a, m in ((0.0, 0.94, 9e6), (4e-9, 0.935, 8e6), (1.6e-8, 0.92, 2e6), (6.4e-8, 0.91, 1e6))]
    outcome = claim.measure(Results(points, []))
    same_k_cpt, = [v for name, v in outcome.numbers.items() if name.startswith("dynamic − fixed actor accuracy")]
    curve, = [v for name, v in outcome.numbers.items() if "frontier at its MACs" in name]
    assert same_k_cpt == pytest.approx([-1.25, -1.25]) and curve == pytest.approx([-0.5, -0.5])
    assert outcome.parts[1][1] == FAILS, "the frontier is shown beside the verdict, not in it"


def test_each_learners_exits_are_shown_beside_the_static_nets_once_per_run():
    static, critic = Series("static nets", "static"), Series("optimistic critic", "optimistic-critic")
    dynamic = Series("actor, dynamic k_cpt", "actor", dynamic=True)

    def run_point(series, seed, k_cpt, heads, arch="chain"):
        heads_alone = {f"exit{n}": {"accuracy": a} for n, a in enumerate(heads, 1)}
        return Point(series, seed, k_cpt, 0.9, 5e6, {"arch": arch, "history": []}, {"heads_alone": heads_alone})

    points = [point(static, seed, None, accuracy, 1e6 * n, f"static-{n}") for seed in (0, 1)
              for n, accuracy in ((1, 0.90), (2, 0.94))]
    points += [run_point(critic, 0, 4e-9, (0.60, 0.90)), run_point(critic, 1, 4e-9, (0.70, 0.92))]
    # a dynamic-k_cpt net evaluated at two k_cpts is one run with one set of heads
    points += [run_point(dynamic, 0, k, (0.80, 0.93)) for k in (0.0, 4e-9)]
    points += [run_point(critic, 0, 1.6e-8, (0.1, 0.1), arch="tree")]  # a tree's leaves are left out
    # a series with its own settings names its own folder, and is judged against its base's static nets
    every_head = Series("optimistic critic, every head", "optimistic-critic", {"head_weight": 1.0})
    points += [run_point(every_head, 0, 4e-9, (0.88, 0.95))]
    table = reproduce.exits_table(Results(points, []))
    assert table[0] == "| series | folder | point | exit1 | exit2 |"
    assert table[2:] == ["| optimistic critic | hybrid-w1 | k_cpt 4e-09 | 65.0 | 91.0 |",
                         "| actor, dynamic k_cpt | hybrid-w1 | dynamic | 80.0 | 93.0 |",
                         f"| optimistic critic, every head | {every_head.folder} | k_cpt 4e-09 | 88.0 | 95.0 |",
                         "| static nets (static-1 … static-2) | hybrid-w1 | — | 90.0 | 94.0 |"]
    assert every_head.folder != "hybrid-w1"
    assert reproduce.exits_table(Results(points[:4], [])) == []


def test_a_point_under_the_frontier_splits_into_routing_head_and_static_net_parts():
    static, critic = Series("static nets", "static"), Series("optimistic critic", "optimistic-critic")
    actor = Series("actor", "actor")

    def routed(series, seed, accuracy, macs, fractions, heads):
        leaves = {f"exit{n}": {"fraction": f} for n, f in enumerate(fractions, 1)}
        heads_alone = {f"exit{n}": {"accuracy": a} for n, a in enumerate(heads, 1)}
        return Point(series, seed, 6.4e-8, accuracy, macs, {"arch": "chain", "history": []},
                     {"leaves": leaves, "heads_alone": heads_alone})

    points = [point(static, seed, None, accuracy, macs, f"static-{n}") for seed in (0, 1)
              for n, accuracy, macs in ((1, 0.91, 1e6), (2, 0.94, 5e6))]
    # most images at exit 1, whose head reads under static-1: the head is the shortfall, not the routing
    points += [routed(critic, 0, 0.89, 2e6, (0.9, 0.1), (0.885, 0.93)), routed(critic, 1, 0.90, 1.5e6, (1.0, 0.0), (0.90, 0.93))]
    # above the frontier on the mean: no rows
    points += [routed(actor, 0, 0.93, 1.2e6, (1.0, 0.0), (0.93, 0.9)), routed(actor, 1, 0.90, 1.2e6, (1.0, 0.0), (0.90, 0.9))]
    # exit 2 taken by most, with the routed MACs under static-2's: that net lies over the frontier there
    late = Series("pragmatic critic", "pragmatic-critic")
    points += [routed(late, 0, 0.92, 4e6, (0.3, 0.7), (0.9, 0.93)), routed(late, 1, 0.89, 4e6, (0.3, 0.7), (0.9, 0.93))]
    table = reproduce.shortfall_table(Results(points, []))
    assert table[2:] == [
        "| optimistic critic | hybrid-w1 | k_cpt 6.4e-08 | 0 | -2.00 | exit1 (90%) | +0.50 | -2.50 | +0.00 |",
        "| optimistic critic | hybrid-w1 | k_cpt 6.4e-08 | 1 | -1.00 | exit1 (100%) | +0.00 | -1.00 | +0.00 |",
        "| pragmatic critic | hybrid-w1 | k_cpt 6.4e-08 | 0 | +1.00 | exit2 (70%) | -1.00 | -1.00 | +3.00 |",
        "| pragmatic critic | hybrid-w1 | k_cpt 6.4e-08 | 1 | -2.00 | exit2 (70%) | -4.00 | -1.00 | +3.00 |"]
    for row in table[2:]:  # the three parts sum to the margin
        margin, _, *parts = row.strip("|").split("|")[4:]
        assert sum(float(v) for v in parts) == pytest.approx(float(margin), abs=0.011)
    assert reproduce.shortfall_table(Results(points[:4] + points[6:8], [])) == []


def test_cifar2_claim_fails_when_no_actor_point_reaches_the_best_static_accuracy():
    static, actor = Series("static nets", "static", {"dataset": "cifar2"}), Series("actor, cifar2", "actor", {"dataset": "cifar2"})
    points = [p for seed in (0, 1) for p in (point(static, seed, None, 0.93, 5e6, "static-2"),
                                             point(actor, seed, 4e-9, 0.92 + seed / 1000, 1e6))]
    outcome = reproduce.figures()["difficulty"].claims[0].measure(Results(points, []))
    assert outcome.verdict == FAILS and "no actor point reaches the best static net's accuracy" in outcome.reason


def test_several_static_learning_rates_plan_one_folder_each(tmp_path, capsys):
    assert reproduce.main(["--dry-run", "--figure", "hybrid", "--seeds", "0", "--static", "1", "--static-lr", "0.1",
                           "0.02", "--logdir", str(tmp_path)]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert {"hybrid-w1/static-static-1-k4e-09-s0", "hybrid-w1-lr0.02/static-static-1-k4e-09-s0"} <= set(listed)


def test_later_seeds_train_each_static_net_at_the_rate_the_first_seed_validated_best(tmp_path, capsys):
    hybrid, rates = [reproduce.figures()["hybrid"]], {"hybrid-w1": [0.1, 0.02]}
    plan = functools.partial(reproduce.plan_runs, hybrid, "smoke", k_cpts=[4e-9], static_columns=[1, 8], static_lrs=rates,
                             logdir=tmp_path, machine={})
    first = plan(seeds=[0])
    validation = {("static-1", 0.1): 0.9, ("static-1", 0.02): 0.8, ("static-8", 0.1): 0.5, ("static-8", 0.02): 0.7}
    for series, config in first["hybrid"]:
        if series.agent == "static":
            run = tmp_path / series.folder / config.run_name
            run.mkdir(parents=True)
            history = [{"evaluations": [{"accuracy": validation[(config.arch, config.lr)]}]}]
            (run / "metrics.json").write_text(json.dumps({"history": history}))
    choices = reproduce.static_lr_choices(first, rates)
    assert choices == {("hybrid-w1", "static-1"): 0.1, ("hybrid-w1", "static-8"): 0.02}
    statics = [(s.folder, c.arch, c.seed) for s, c in plan(seeds=[0, 1], lr_choices=choices)["hybrid"] if s.agent == "static"]
    assert sorted(statics) == sorted([("hybrid-w1", "static-1", 0), ("hybrid-w1", "static-8", 0),
                                      ("hybrid-w1-lr0.02", "static-1", 0), ("hybrid-w1-lr0.02", "static-8", 0),
                                      ("hybrid-w1", "static-1", 1), ("hybrid-w1-lr0.02", "static-8", 1)])
    # until the first seed has both runs of a net, a later seed trains it at every rate
    (tmp_path / "hybrid-w1-lr0.02" / "static-static-8-k4e-09-s0" / "metrics.json").unlink()
    assert reproduce.static_lr_choices(first, rates) == {("hybrid-w1", "static-1"): 0.1}
    later = [(s.folder, c.arch) for s, c in plan(seeds=[0, 1], lr_choices=reproduce.static_lr_choices(first, rates))["hybrid"]
             if s.agent == "static" and c.seed == 1]
    assert sorted(later) == [("hybrid-w1", "static-1"), ("hybrid-w1", "static-8"), ("hybrid-w1-lr0.02", "static-8")]


class StopSweep(Exception):
    pass


def test_the_first_seeds_static_nets_train_before_the_later_seeds_are_planned(tmp_path, monkeypatch):
    sweeps = []

    def fake_sweep(configs, **_):  # static-1 validates best at 0.1, static-2 at 0.02
        sweeps.append([(c.agent, c.arch, c.seed, c.lr) for c in configs])
        for c in configs:
            run = Path(c.logdir) / c.run_name
            if c.agent == "static" and c.seed == 0 and not run.exists():
                accuracy = {("static-1", 0.1): 0.9, ("static-2", 0.02): 0.9}.get((c.arch, c.lr), 0.5)
                run.mkdir(parents=True)
                (run / "metrics.json").write_text(json.dumps({"history": [{"evaluations": [{"accuracy": accuracy}]}], "train_seconds": 1.0}))
        if len(sweeps) in (1, 3):
            raise StopSweep

    monkeypatch.setattr(reproduce, "run_sweep", fake_sweep)
    args = ["--figure", "hybrid", "--seeds", "0", "1", "--static", "1", "2", "--static-lr", "0.1", "0.02", "--k-cpts",
            "4e-9", "--logdir", str(tmp_path / "runs"), "--figures-dir", str(tmp_path / "figures"), "--report",
            str(tmp_path / "report.md")]
    with pytest.raises(StopSweep):
        reproduce.main(args)  # interrupted in the first phase: the first seed's static nets at both rates, nothing else
    assert sorted(sweeps[0]) == sorted(("static", arch, 0, lr) for arch in ("static-1", "static-2") for lr in (0.1, 0.02))
    with pytest.raises(StopSweep):
        reproduce.main(args)
    later = {(arch, lr) for agent, arch, seed, lr in sweeps[2] if agent == "static" and seed == 1}
    assert later == {("static-1", 0.1), ("static-2", 0.02)}
    assert {agent for agent, *_ in sweeps[2]} > {"static"}


def test_a_figure_can_train_more_seeds_than_the_others_and_shares_its_runs_with_them(tmp_path, capsys):
    assert reproduce.main(["--dry-run", "--figure", "hybrid", "trees", "--seeds", "0", "--figure-seeds", "hybrid=0,1",
                           "--static", "1", "--static-lr", "0.1", "--k-cpts", "0", "--logdir", str(tmp_path)]) == 0
    hybrid, trees = capsys.readouterr().out.split("trees:")
    seeds = lambda text: {line.split()[0].rsplit("-s", 1)[1] for line in text.splitlines() if line.startswith("  ")}
    assert seeds(hybrid) == {"0", "1"} and seeds(trees.split("|")[0]) == {"0"}
    assert "  hybrid-w1/actor-chain-k0-s0" in trees, "the chain actor of seed 0 is one run of both figures"


@pytest.mark.parametrize("pairs, problem", [(["trees=0,1"], "not among the figures chosen"),
                                            (["hybrid=1,2"], "must hold seed 0"),
                                            (["hybrid=0;1"], "whole numbers separated by commas")])
def test_figure_seeds_that_cannot_be_planned_are_refused_before_anything_trains(tmp_path, capsys, pairs, problem):
    assert reproduce.main(["--dry-run", "--figure", "hybrid", "--seeds", "0", "--figure-seeds", *pairs,
                           "--logdir", str(tmp_path)]) != 0
    assert problem in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_figures_share_their_runs_and_a_dry_run_trains_nothing(tmp_path, capsys):
    assert reproduce.main(["--dry-run", "--figure", "all", "--seeds", "0", "--logdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    # hybrid: 8 static nets at lr 0.1 and 0.02 each, 4 learners at 4 k_cpt, one dynamic-k_cpt actor
    assert sum(1 for line in out.split("regularization:")[0].splitlines() if line.startswith("  ")) == 2 * 8 + 16 + 1
    assert "hybrid-w1-lr0.02/static-static-8-k4e-09-s0" in listed and "learning-rate trials" not in out
    assert "hybrid-w1-talroff/actor-chain-k0-s0" in listed and "cifar10-w3/actor-chain-k7.11111e-09-s0" in listed
    assert "hybrid-w1-cmodroutingon/actor-chain-k0-s0" in listed
    # hybrid 33 + k_dec 4 + d̂ 4 + TALR 8 + tree 4 + CIFAR 3x(16 + 4) + widths 2x(16 + 4)
    assert "| all (shared runs once) | 153 | 0 |" in out
    assert not any(tmp_path.iterdir())


def test_the_papers_critics_learn_heads_by_their_routed_share_at_lr_0_1(tmp_path):
    planned = reproduce.plan_runs([reproduce.figures()["hybrid"]], "smoke", [0], [4e-9], [], {}, tmp_path, {})
    critics = [config for series, config in planned["hybrid"] if config.agent.endswith("critic")
               and "every head" not in series.label]
    assert critics and all((c.options.head_weight, c.options.lr) == (0.0, 0.1) for c in critics)
    assert {(c.options.utility_error, c.options.router_lr_scale) for c in critics} == {("cross_entropy", 1.0)}, \
        "the paper's critics value exits in nats, their routers at the columns' rate"
    ours = [config for series, config in planned["hybrid"] if "every head" in series.label]
    assert ours and {(c.options.head_weight, c.options.lr, c.options.utility_error, c.options.router_lr_scale)
                     for c in ours} == {(1.0, 0.02, "zero_one", 100.0)}, "the package's critic, beside the paper's"


def test_bad_flags_are_one_line_with_status_2(tmp_path, capsys):
    assert reproduce.main(["--dry-run", "--figure", "hybrid", "--set", "no_such_field=1", "--logdir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert reproduce.main(["--dry-run", "--static-lr", "fast", "--logdir", str(tmp_path)]) == 2
    assert "--static-lr must be numbers or auto, got 'fast'" in capsys.readouterr().err


@pytest.mark.slow
def test_one_smoke_figure_goes_from_sweep_to_report(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    write_mnist_idx(data / "MNIST" / "raw")
    write_cifar_pickles(data / "cifar-10-batches-py")
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    report = tmp_path / "docs" / "reproduction.md"
    args = ["--figure", "regularization", "--preset", "smoke", "--seeds", "0", "--static", "1", "2", "--k-cpts", "4e-9",
            "--static-lr", "0.1", "--workers", "0", "--data-dir", str(data), "--set", "validation_fraction=0.4",
            "--logdir", str(tmp_path / "runs"), "--figures-dir", str(tmp_path / "figures"), "--report", str(report)]
    assert reproduce.main(args) == 0
    text = report.read_text()
    assert "## Regularization" in text and text.count("- verdict: **") == 2 and text.count("- the paper: “") == 2
    assert "## The schedule" in text and "| static-2 | 0 |" in text  # one seed of each net: too few runs to judge
    assert "Not enough runs to judge the schedule" in text
    assert text.count("| regularization | ") == 2 + 1  # the verdicts table's rows, and the budget's
    assert "| regularization | 5 | 5 |" in text
    assert "| actor, k_dec 0 | hybrid-w1-kdec0.0 | k_cpt 4e-09 | 0 |" in text
    images = [line.split("(")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]
    assert len(images) == 7 and all((report.parent / image).is_file() for image in images)
    assert reproduce.main(args) == 0  # run again: every run is complete and skipped
    assert capsys.readouterr().out.count("complete, skipped") == 5
    assert ("--figure regularization --preset smoke --seeds 0 --k-cpts 4e-09 --static 1 2 --static-lr 0.1 "
            "--set validation_fraction=0.4") in text  # the command that reproduces the numbers

    trained = sorted(p.name for p in (tmp_path / "runs").rglob("*") if p.is_dir())
    seed = args.index("--seeds") + 1
    assert reproduce.main([*args[:seed], "0", "1", *args[seed + 1:], "--report-only"]) == 0
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*") if p.is_dir()) == trained  # nothing trained
    text = report.read_text()
    assert "Runs not finished (5):" in text and "actor-chain-k4e-09-s1" in text
    assert text.count("one seed; a verdict needs two or more") == 3  # k_dec's claim, and both parts of d̂'s


def test_the_report_scales_its_budget_to_the_papers_iterations(tmp_path):
    """The paper trains 80,000 iterations; a 600-iteration grid's estimates scale by 133."""
    configs = [reproduce.TrainConfig(agent="actor", arch="chain", preset="quick", iterations=600, logdir=str(tmp_path), run_name="a"),
               reproduce.TrainConfig(agent="static", arch="static-1", preset="quick", iterations=600,
                                     logdir=str(tmp_path), run_name="s")]
    total = reproduce.budget_row(configs, workers=2)
    scale = 80_000 / 600
    text = "\n".join(reproduce.paper_schedule(configs, total))
    assert "133× these runs' 600" in text and "the same 2 runs" in text
    assert f"{total['gpu_hours'] * scale:,.0f} hours on one H100" in text
    assert f"{total['cpu_hours'] * scale:,.0f} CPU-hours" in text


def test_the_budget_estimates_unfinished_runs_from_finished_runs_of_the_same_learner_and_net(tmp_path):
    """A tree run takes longer per MAC than the README's static-8 timing says: once one run of a
    learner and net has finished, the others are estimated at its measured rate, and the budget
    says how much is still to train."""
    def config(agent, arch, name, iterations=600):
        return reproduce.TrainConfig(agent=agent, arch=arch, preset="quick", iterations=iterations,
                                     logdir=str(tmp_path), run_name=name)

    done, twice_as_long = config("actor", "tree", "t0"), config("actor", "tree", "t1", iterations=1200)
    other = config("actor", "chain", "c0")
    model = reproduce.estimated_seconds(done)[0]
    (tmp_path / "t0").mkdir()
    (tmp_path / "t0" / "metrics.json").write_text(json.dumps({"train_seconds": 3 * model}))
    row = reproduce.budget_row([done, twice_as_long, other], workers=2)
    chain = reproduce.estimated_seconds(other)[0]
    assert row["finished"] == 1 and row["measured_hours"] == pytest.approx(3 * model / 3600)
    # the unfinished tree at 3× the model (the finished one's rate), the chain at the model's
    assert row["left_worker_hours"] == pytest.approx((6 * model + chain) / 3600 / 2)
    assert row["cpu_hours"] == pytest.approx((9 * model + chain) / 3600)
    assert "| of which still to train |" in reproduce.budget_table({"trees": row})[0]


def test_the_report_names_the_runs_trained_on_a_gpu(tmp_path):
    """A sweep may train some runs on a GPU (their results are not bit-reproducible): the report says which."""
    configs = [reproduce.TrainConfig(agent="static", arch=f"static-{n}", logdir=str(tmp_path / "w2"), run_name=f"s{n}")
               for n in (1, 2, 3)]
    for config, device, finished in zip(configs, ("cuda", "auto", "cuda:1"), (True, True, False)):
        run = tmp_path / "w2" / config.run_name
        run.mkdir(parents=True)
        dataclasses.replace(config, device=device).save(run / "config.json")
        if finished:
            (run / "metrics.json").write_text("{}")
    assert reproduce.trained_on_gpus(configs) == ["1 of the 3 runs trained on a GPU, the others on the CPU: `w2/s1`.", ""]
    assert reproduce.trained_on_gpus(configs[1:]) == []
