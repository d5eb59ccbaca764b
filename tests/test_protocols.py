"""Anytime prediction and budgeted batch classification: validation-only calibration, costs,
and the command that draws them beside learned routers."""

from __future__ import annotations

import copy

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.agents import threshold
from routing_rl.app import protocols
from routing_rl.app.cli import main as train
from routing_rl.data import Split
from routing_rl.nets import resnet
from routing_rl.nets.multiscale import tree
from routing_rl.training.batchnorm import fresh_statistics
from routing_rl.training.evaluate import heads_alone
from helpers import varied_images


def readings(n: int, seed: int, easy: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Made-up (confidence, correct) of 3 exits: deeper exits more confident and more often right."""
    generator = torch.Generator().manual_seed(seed)
    confidence = (torch.rand(n, 3, generator=generator, dtype=torch.float64) * 0.5 + torch.tensor([0.3, 0.4, 0.5])
                  + easy).clamp(max=1)
    correct = torch.rand(n, 3, generator=generator) < confidence.float()
    return confidence, correct


def test_thresholds_come_from_the_validation_split_alone():
    validation, test = readings(400, 0, easy=0.0), readings(300, 1, easy=0.2)  # the test split is easier
    points = protocols.calibrate_and_apply(validation, test, [10, 20, 30], qs=[0.5, 1.0, 1.5])
    for point in points:
        fractions = threshold.geometric_fractions(point["q"], 3)
        expected = threshold.thresholds_for_fractions(validation[0], fractions)
        assert point["thresholds"] == expected.tolist()
        on_test = threshold.thresholds_for_fractions(test[0], fractions)
        assert point["thresholds"] != on_test.tolist(), "calibrating on test would have given other thresholds"
        # the share leaving at each exit is the target on validation; the easier test split leaves earlier
        exits = threshold.exit_positions(validation[0], expected).bincount(minlength=3) / 400
        torch.testing.assert_close(exits.double(), fractions, atol=0.01, rtol=0)
        assert point["mean_macs"] < point["validation_mean_macs"]
    other_test = readings(300, 2, easy=0.0)
    again = protocols.calibrate_and_apply(validation, other_test, [10, 20, 30], qs=[0.5, 1.0, 1.5])
    assert [p["thresholds"] for p in again] == [p["thresholds"] for p in points], "the test split never moves a threshold"


def test_budgeted_batch_reads_the_test_split_only_after_the_thresholds_are_fixed(monkeypatch):
    net = resnet.build("resnet20-exits", width=0.25, classes=3).eval()
    validation = Split(varied_images(40, seed=1), torch.randint(3, (40,)), torch.zeros(40, dtype=torch.long))
    test = Split(varied_images(30, seed=2), torch.randint(3, (30,)), torch.zeros(30, dtype=torch.long))
    seen = []
    calibrate = threshold.thresholds_for_fractions
    monkeypatch.setattr(protocols, "thresholds_for_fractions", lambda c, f: seen.append(c.shape[0]) or calibrate(c, f))
    points = protocols.budgeted_batch(net, validation, test, qs=[0.5, 1.0])
    assert seen == [40, 40], "every threshold is fitted on the 40 validation examples, none on the 30 test ones"
    assert len(points) == 2 and all(0 <= p["accuracy"] <= 1 for p in points)


def test_anytime_points_are_each_exit_alone_and_cost_its_segments_and_head():
    net = resnet.build("resnet20-exits", width=0.25, classes=3).eval()
    test = Split(varied_images(24, seed=3), torch.randint(3, (24,)), torch.zeros(24, dtype=torch.long))
    points = protocols.anytime(net, test)
    alone = heads_alone(net, test)
    assert [p["exit"] for p in points] == ["exit1", "exit2", "exit3"]
    assert [p["accuracy"] for p in points] == [alone[leaf]["accuracy"] for leaf in net.leaves]
    reach, leave = protocols.exit_macs(net)
    assert reach[0] == net.macs["seg1"] + net.macs["exit1"] and reach[2] == resnet.build("resnet20", width=0.25, classes=3).leaf_path_macs[0]
    assert leave == [reach[0], reach[1] + net.macs["exit1"], reach[2] + net.macs["exit1"] + net.macs["exit2"]]
    assert [p["mean_macs"] for p in points] == reach


def test_recalibrated_exits_are_judged_by_the_statistics_of_every_example_not_of_a_routed_few():
    net = resnet.build("resnet20-exits", width=0.25, classes=3)
    train_images = varied_images(64, seed=4)
    test = Split(varied_images(24, seed=5), torch.randint(3, (24,)), torch.zeros(24, dtype=torch.long))
    with fresh_statistics(net):
        net(train_images)
    fair = protocols.exit_readings(net, test)
    starved = copy.deepcopy(net)  # as sampled training leaves a node: statistics of the few examples routed there
    with fresh_statistics(starved):
        starved(train_images[:3] * 3 + 1)
    before = [b.clone() for b in starved.buffers()]
    assert not torch.allclose(protocols.exit_readings(starved, test)[0], fair[0])
    again = protocols.recalibrated(starved, train_images)
    torch.testing.assert_close(protocols.exit_readings(again, test)[0], fair[0])
    assert torch.equal(protocols.exit_readings(again, test)[1], fair[1])
    assert all(torch.equal(b, a) for b, a in zip(before, starved.buffers())), "the net given is left as it is"


def test_recalibration_mixes_a_sorted_split_so_the_variance_between_its_kinds_counts():
    net = resnet.build("resnet20-exits", width=0.25, classes=3)
    kinds = torch.cat([varied_images(200, seed=6), varied_images(200, seed=7) * 3 + 2])  # sorted: one kind, then the other
    exact = copy.deepcopy(net)
    with fresh_statistics(exact):
        exact(kinds)  # one batch of all 400: the whole set's statistics
    first = next(name for name, m in net.named_modules() if isinstance(m, torch.nn.BatchNorm2d))
    variance = dict(protocols.recalibrated(net, kinds, batch_size=200).named_modules())[first].running_var
    torch.testing.assert_close(variance, dict(exact.named_modules())[first].running_var, rtol=0.15, atol=0)


def test_a_net_that_branches_is_refused():
    with pytest.raises(ValueError, match="the protocols need a chain"):
        protocols.exit_macs(tree())


def run(tiny_data, logdir, name, *args):
    assert train(["--env", "routing_rl/CIFAR10Routing-v0", "--arch", "resnet20-exits", "--k-cpt", "4e-9", "--preset", "smoke",
                  "--iterations", "2", "--batch-size", "8", "--eval-every", "1", "--eval-examples", "10",
                  "--validation-fraction", "0.4", "--data-dir", str(tiny_data), "--download", "false", "--device", "cpu",
                  "--logdir", str(logdir), "--run-name", name, "--json", *args]) == 0
    return logdir / name


def test_one_command_writes_the_figure_the_table_and_tensorboard(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    backbone = run(tiny_data, tmp_path / "runs", "threshold", "--agent", "threshold")
    actor = run(tiny_data, tmp_path / "runs", "actor", "--agent", "actor")
    capsys.readouterr()
    out = tmp_path / "protocols"
    assert protocols.main([str(backbone), "--routers", str(actor), "--out", str(out)]) == 0
    assert {"protocols.png", "protocols.csv", "protocols.md"} <= {p.name for p in out.iterdir()}
    table = (out / "protocols.md").read_text()
    assert "## Anytime prediction" in table and "| exit3 |" in table
    assert table.count("| 0.") + table.count("| 1.") >= len(protocols.MSDNET_Q), "a row per q"
    assert "## Learned routers" in table and "| actor |" in table
    events = EventAccumulator(str(next(out.glob("events.out.tfevents.*"))), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"protocols/anytime_prediction__each_exit", "protocols/budgeted_batch__validated_thresholds"} <= tags
    assert "protocols/accuracy_macs" in events.Tags()["images"]
    anytime_steps = [event.step for event in events.Scalars("protocols/anytime_prediction__each_exit")]
    assert anytime_steps == protocols.exit_macs(resnet.build("resnet20-exits"))[0]
    assert protocols.main([str(backbone), "--recalibrate", "--out", str(tmp_path / "recalibrated")]) == 0
    assert "batch norm recalibrated" in (tmp_path / "recalibrated" / "protocols.md").read_text()


def test_router_runs_of_another_task_are_refused_before_anything_is_written(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    backbone = run(tiny_data, tmp_path / "runs", "threshold", "--agent", "threshold")
    other = run(tiny_data, tmp_path / "runs", "hybrid", "--agent", "actor", "--env", "routing_rl/HybridRouting-v0")
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        protocols.main([str(backbone), "--routers", str(other), "--out", str(tmp_path / "out")])
    assert refused.value.code == 2 and "compare runs of one task" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_router_is_judged_against_each_exit_alone_too():
    exits = [{"series": protocols.ANYTIME, "mean_macs": macs, "accuracy": accuracy}
             for macs, accuracy in ((10e6, 0.6), (20e6, 0.7), (30e6, 0.8))]
    budgeted = [{"series": protocols.BUDGETED, "mean_macs": macs, "accuracy": accuracy}
                for macs, accuracy in ((12e6, 0.65), (25e6, 0.74))]  # the grid of q stops short of the deepest exit
    deepest, cheaper = ({"series": "actor", "mean_macs": 30e6, "accuracy": 0.8},
                        {"series": "actor", "mean_macs": 24e6, "accuracy": 0.77})
    protocols.with_margins([deepest, cheaper], [*exits, *budgeted])
    assert deepest["vs_budgeted_batch"] == pytest.approx(0.0), "sending everyone to the deepest exit is no gain over it"
    # the upper hull runs straight from the 12M budget to the deepest exit, above the 20M and 25M points
    assert cheaper["vs_budgeted_batch"] == pytest.approx(100 * (0.77 - (0.65 + (24 - 12) / (30 - 12) * 0.15)))


def test_routers_reading_exit_confidence_are_a_series_of_their_own():
    from routing_rl.app.figures import series_name

    run = {"agent": "actor", "k_cpt": 4e-9, "arch": "resnet20-exits", "config": {"exit_confidence": False}}
    assert series_name(run) == "actor"
    assert series_name({**run, "config": {"exit_confidence": True}}) == "actor, reading exit confidence"


@pytest.mark.slow
def test_the_protocols_on_real_cifar10_after_a_short_joint_schedule(real_data_dir, real_cache_dir, tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(real_cache_dir))
    logdir = tmp_path / "runs"
    budget = ["--iterations", "30", "--batch-size", "32", "--eval-every", "30", "--train-examples", "2000",
              "--eval-examples", "500", "--data-dir", str(real_data_dir), "--download", "false", "--device", "cpu",
              "--logdir", str(logdir), "--json", "--env", "routing_rl/CIFAR10Routing-v0", "--arch", "resnet20-exits"]
    assert train([*budget, "--agent", "threshold", "--run-name", "threshold"]) == 0
    assert train([*budget, "--agent", "actor", "--k-cpt", "4e-9", "--run-name", "actor"]) == 0
    capsys.readouterr()
    points, _ = protocols.protocol_points(logdir / "threshold", [logdir / "actor"])
    anytime = [p for p in points if p["series"] == protocols.ANYTIME]
    budgeted = [p for p in points if p["series"] == protocols.BUDGETED]
    assert [p["exit"] for p in anytime] == ["exit1", "exit2", "exit3"] and len(budgeted) == len(protocols.MSDNET_Q)
    assert all(0 <= p["accuracy"] <= 1 for p in points) and anytime[-1]["mean_macs"] == 40_551_040
    assert all(budgeted[0]["mean_macs"] <= p["mean_macs"] <= anytime[-1]["mean_macs"] + anytime[0]["mean_macs"]
               for p in budgeted)
    assert any(p["series"] == "actor" and "vs_budgeted_batch" in p for p in points)
