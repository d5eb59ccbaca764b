import math

import pytest
import torch

from routing_rl.agents.registry import make_learner
from routing_rl.agents.threshold import exit_positions, geometric_fractions, thresholds_for_fractions
from routing_rl.training.config import make_config
from routing_rl.data import Split
from routing_rl.training.evaluate import evaluate
from routing_rl.core.execution import route

CONFIDENCE = torch.tensor([
    [0.9, 0.5, 0.1],
    [0.8, 0.9, 0.2],
    [0.3, 0.7, 0.3],
    [0.2, 0.6, 0.4],
], dtype=torch.float64)


def test_geometric_fractions():
    fractions = geometric_fractions(2.0, 3)
    torch.testing.assert_close(fractions, torch.tensor([2, 4, 8], dtype=torch.float64) / 14)
    assert geometric_fractions(1e-9, 4)[0].item() == pytest.approx(1.0)


def test_thresholds_give_each_head_its_fraction():
    thresholds = thresholds_for_fractions(CONFIDENCE, torch.tensor([0.5, 0.25, 0.25]))
    # head 0: the two most confident (0.9, 0.8) exit, threshold halfway to 0.3;
    # head 1: of the rest (0.7, 0.6), one exits, threshold halfway between them
    torch.testing.assert_close(thresholds, torch.tensor([0.55, 0.65], dtype=torch.float64))
    assert exit_positions(CONFIDENCE, thresholds).tolist() == [0, 0, 1, 2]
    nobody_early = thresholds_for_fractions(CONFIDENCE, torch.tensor([0.0, 0.0, 1.0]))
    assert nobody_early.tolist() == [math.inf, math.inf]
    assert exit_positions(CONFIDENCE, nobody_early).tolist() == [2, 2, 2, 2]


def varied_split(n, seed):
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 3, 32, 32, generator=generator) * torch.rand(n, 1, 1, 1, generator=generator) * 3
    labels = (images.mean((1, 2, 3)) > 0.75).long()
    return Split(images, labels, torch.zeros(n, dtype=torch.long))


@pytest.fixture(scope="module")
def trained():
    config = make_config("smoke", agent="threshold", arch="chain", lr=0.02)
    learner = make_learner(config, 2, torch.device("cpu"))
    train = varied_split(16, 0)
    for i in range(3):
        learner.train_step(train, i)
    return learner


def test_threshold_learner_trains_every_head(trained):
    stats = trained.train_step(varied_split(8, 3), 3)
    assert {"losses/c_err", "losses/c_mod", "losses/total", "charts/lr", "charts/train_accuracy"} <= set(stats)
    for leaf in trained.net.leaves:
        assert trained.net.nodes[leaf].transform.linear.weight.grad.abs().max() > 0


@pytest.mark.parametrize("exit_weight", [0.0, 0.25])
def test_exit_weight_scales_every_early_heads_gradient_and_not_the_deepest(exit_weight):
    grads = {}
    for weight in (1.0, exit_weight):
        config = make_config("smoke", agent="threshold", arch="chain", lr=0.02, k_l2=0.0, exit_weight=weight)
        learner = make_learner(config, 2, torch.device("cpu"))
        learner.train_step(varied_split(16, 0), 0)  # the first step: same weights, so gradients compare
        grads[weight] = {leaf: learner.net.nodes[leaf].transform.linear.weight.grad.clone() for leaf in learner.net.leaves}
    leaves = learner.chain_leaves
    for leaf in leaves[:-1]:
        torch.testing.assert_close(grads[exit_weight][leaf], exit_weight * grads[1.0][leaf])
    torch.testing.assert_close(grads[exit_weight][leaves[-1]], grads[1.0][leaves[-1]])


def first_step_gradients(**options):
    config = make_config("smoke", agent="threshold", arch="chain", lr=0.02, k_l2=0.0, **options)
    learner = make_learner(config, 2, torch.device("cpu"))
    learner.train_step(varied_split(16, 0), 0)  # the first step: same weights, so gradients compare
    heads = {leaf: learner.net.nodes[leaf].transform.linear.weight.grad.clone() for leaf in learner.net.leaves}
    trunk = torch.cat([p.grad.flatten() for p in learner.net.nodes[learner.net.root].transform.parameters()])
    return heads, trunk


def test_trunk_gradient_scales_only_what_the_early_heads_pass_to_the_trunk():
    heads, trunk = {}, {}
    for share in (1.0, 0.0, 0.25):
        heads[share], trunk[share] = first_step_gradients(trunk_gradient=share)
    for leaf in heads[1.0]:
        torch.testing.assert_close(heads[0.25][leaf], heads[1.0][leaf])  # the heads learn at full rate
    # the root's gradient: the deepest head's, plus `share` of the early heads'
    assert not torch.allclose(trunk[0.0], trunk[1.0])
    torch.testing.assert_close(trunk[0.25], 0.25 * trunk[1.0] + 0.75 * trunk[0.0])
    _, deepest_only = first_step_gradients(exit_weight=0.0)
    torch.testing.assert_close(trunk[0.0], deepest_only)


@pytest.mark.parametrize("option", ["exit_weight", "trunk_gradient"])
def test_a_share_outside_zero_to_one_is_refused(option):
    flag = option.replace("_", "-")
    with pytest.raises(ValueError, match=rf"--{flag} must lie in \[0, 1\]"):
        make_config("smoke", agent="threshold", arch="chain", **{option: 1.5})


def test_before_calibration_everyone_runs_to_the_last_head(trained):
    routed = route(trained.net.eval(), varied_split(6, 1).images, trained.decide(None))
    trained.net.train()
    assert routed.leaf.tolist() == [len(trained.net.leaves) - 1] * 6


def test_calibrated_thresholds_meet_the_budget_and_the_evaluator_agrees(trained):
    validation = varied_split(24, 2)
    budgets = trained.budget_grid(4)
    results = trained.calibrate(validation, budgets)
    macs = [r["mean_macs"] for r in results]
    assert all(m <= b * (1 + 1e-9) for m, b in zip(macs, budgets))
    assert macs == sorted(macs) and macs[-1] > macs[0]
    middle = results[2]
    thresholds = trained.fit_thresholds(validation, middle["budget"])
    assert thresholds.tolist() == middle["thresholds"]
    evaluated = evaluate(trained.net, validation, decide=trained.decide(None), batch_size=7)
    assert evaluated["mean_macs"] == pytest.approx(middle["mean_macs"])
    assert evaluated["accuracy"] == pytest.approx(middle["accuracy"])
    state = trained.state_dict()
    assert state["thresholds"].tolist() == middle["thresholds"]


def test_thresholds_fitted_to_the_validation_cost_cost_no_more_there_than_any_budget(trained):
    validation = varied_split(40, 3)
    k_cpt, kept = 1e-8, trained.config.k_cpt  # a cost per MAC at which every head has its price
    trained.config.k_cpt = k_cpt
    try:
        *budgets, fitted = trained.evaluation_points(validation)
    finally:
        trained.config.k_cpt = kept

    def cost(fields):
        return 1.0 - fields["validation_accuracy"] + k_cpt * fields["validation_mean_macs"]

    fitted_fields, _, decide = fitted
    assert fitted_fields["label"] == f"fitted to the validation cost at k_cpt {k_cpt:g}"
    assert all(cost(fitted_fields) <= cost(fields) + 1e-12 for fields, _, _ in budgets)
    evaluated = evaluate(trained.net, validation, decide=decide, batch_size=9)
    assert evaluated["accuracy"] == pytest.approx(fitted_fields["validation_accuracy"])
    assert evaluated["mean_macs"] == pytest.approx(fitted_fields["validation_mean_macs"])


def test_threshold_needs_a_chain():
    with pytest.raises(ValueError, match="--arch chain"):
        make_learner(make_config("smoke", agent="threshold", arch="tree"), 2, torch.device("cpu"))
