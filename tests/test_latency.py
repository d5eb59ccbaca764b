"""The measured-latency cost model: the profile, and its use in every learner and the env."""

import json

import numpy as np
import pytest
import torch

from helpers import vector_tree
from routing_rl.agents.critic import full_targets
from routing_rl.agents.registry import build_net, make_learner
from routing_rl.core.graph import FullOutput
from routing_rl.core.k_cpt import CostModel
from routing_rl.core.latency import UNIT, latency_cost, profile_latency
from routing_rl.data import SOURCES, RoutingDataset, Split
from routing_rl.envs.factory import make_traffic
from routing_rl.training.config import make_config
from routing_rl.training.cost import COST_FILE, run_cost_model

CPU = torch.device("cpu")


def fake_profile(net, seconds: dict[str, float]) -> dict:
    """An injected profile: ``seconds`` per example of each node's transform (routers free)."""
    times = {name: {"transform": seconds.get(name, 0.0), "router": 0.0} for name in net.order}
    return {"seconds": times, "batch_size": 1}


def skewed(net, slow: str, factor: float = 50.0) -> CostModel:
    """A latency model in which ``slow`` takes ``factor`` times as long as any other node."""
    return latency_cost(net, fake_profile(net, {name: factor if name == slow else 1.0 for name in net.order}))


def test_the_profile_times_every_node_and_router_and_keeps_the_macs_scale():
    net = vector_tree()
    profile = profile_latency(net, batch_size=8, warmup=1, repeats=3)
    seconds = profile["seconds"]
    assert set(seconds) == set(net.order) and profile["batch_size"] == 8 and profile["threads"] >= 1
    for name in net.order:
        assert seconds[name]["transform"] > 0
        assert (seconds[name]["router"] > 0) == net.nodes[name].is_junction
    assert profile["full_seconds"] == pytest.approx(sum(s["transform"] + s["router"] for s in seconds.values()))
    model = latency_cost(net, profile)
    assert model.unit == UNIT and model.full == pytest.approx(net.full_macs)
    per_second = profile["mac_equivalents_per_second"]
    for name in net.order:
        assert model.node[name] == pytest.approx((seconds[name]["transform"] + seconds[name]["router"]) * per_second)
    assert model.leaf.tolist() == pytest.approx([sum(model.node[n] for n in net.nodes_to(leaf)) for leaf in net.leaves])
    json.dumps(profile)
    assert net.training, "profiling leaves the net's mode as it was"


def test_profiles_are_checked():
    net = vector_tree()
    with pytest.raises(ValueError, match="positive integer"):
        profile_latency(net, batch_size=0)
    with pytest.raises(ValueError, match="no time for"):
        latency_cost(net, {"seconds": {"root": {"transform": 1.0, "router": 0.0}}})
    with pytest.raises(ValueError, match="sum to zero"):
        latency_cost(net, fake_profile(net, {}))


def images(n=6, seed=0, classes=3):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 32, 32, generator=generator) * torch.rand(n, 1, 1, 1, generator=generator) * 2
    return Split(x, torch.randint(0, classes, (n,), generator=generator), torch.zeros(n, dtype=torch.long))


def node_weighted_cost(learner, reach: torch.Tensor, cost: CostModel) -> torch.Tensor:
    """``mean_b Σ_nodes reach[b, n] · cost(n)``: c_cpt per unit k_cpt, node by node."""
    node_cost = torch.tensor([cost.node[name] for name in learner.paths.node_index], dtype=reach.dtype)
    return (reach.detach() * node_cost).sum(1).mean()


@pytest.mark.parametrize("overrides", [
    dict(agent="actor"),
    dict(agent="critic"),
    dict(agent="critic", policy="greedy"),
    dict(agent="optimistic-critic", policy="eps-greedy", arch="tree"),
], ids=lambda o: "-".join(o.values()))
def test_routing_learners_charge_k_cpt_times_the_cost_models_cost(overrides):
    # a critic's side heads off: reach also marks them, which training runs but inference never charges
    side_heads = {"side_heads": False} if overrides["agent"] != "actor" else {}
    config = make_config("smoke", k_cpt=1e-6, **side_heads, **overrides)
    net = build_net(config, 3)
    cost = skewed(net, net.junctions[1])  # the second junction's column is slow
    learner = make_learner(config, 3, CPU, cost)
    terms = learner.losses(images(), 0)
    expected = 1e-6 * node_weighted_cost(learner, terms["reach"], cost)
    assert float(terms["c_cpt"].detach()) == pytest.approx(float(expected), rel=1e-5)
    macs = make_learner(config, 3, CPU)
    assert float(macs.losses(images(), 0)["c_cpt"].detach()) == pytest.approx(
        1e-6 * float(node_weighted_cost(macs, terms["reach"], CostModel.macs(net))), rel=1e-5
    ), "same net, same batch: only the cost model differs"


def test_critic_targets_value_each_subtree_at_the_cost_models_cost():
    net = vector_tree()
    errors = torch.zeros(1, len(net.leaves))
    out = FullOutput(scores={j: torch.zeros(1, len(net.nodes[j].sinks)) for j in net.junctions}, descriptors={}, logits={})
    cost = skewed(net, "leafA", factor=10.0)
    targets = full_targets(net, out, errors, torch.ones(1), optimistic=True, cost=cost)
    # root's sinks: leafA alone, mid -> leafB, fork -> best of leafC/leafD (one node each below fork)
    unit = cost.node["root"]
    assert targets["root"][0].tolist() == pytest.approx([-10 * unit, -2 * unit, -2 * unit])


def test_the_static_learner_charges_its_paths_cost():
    config = make_config("smoke", agent="static", arch="static-2", k_cpt=1e-6)
    net = build_net(config, 3)
    cost = skewed(net, net.order[0])
    stats = make_learner(config, 3, CPU, cost).train_step(images(), 0)
    assert stats["losses/c_cpt"] == pytest.approx(1e-6 * cost.full, rel=1e-6)
    assert stats["charts/train_mean_macs"] == net.full_macs, "MACs are still reported as MACs"


def test_threshold_budgets_are_in_the_cost_models_units():
    config = make_config("smoke", agent="threshold", arch="chain")
    net = build_net(config, 3)
    cost = skewed(net, net.order[0], factor=1000.0)  # the first column dominates every path
    learner = make_learner(config, 3, CPU, cost)
    grid = learner.budget_grid(4)
    first, last = cost.leaf[net.leaf_index[learner.chain_leaves[0]]], cost.leaf[net.leaf_index[learner.chain_leaves[-1]]]
    assert grid[0] == pytest.approx(float(first)) and grid[-1] == pytest.approx(float(last))
    for result in learner.calibrate(images(12), grid[1:3]):
        assert result["mean_cost"] <= result["budget"] * (1 + 1e-9)
        assert result["mean_macs"] >= float(net.leaf_macs.min())
    (fields, _, _), *_ = learner.evaluation_points(images(12))
    assert fields["budget_unit"] == UNIT and fields["label"].endswith(UNIT)


def test_the_envs_rewards_charge_the_cost_models_cost():
    generator = torch.Generator().manual_seed(0)
    split = Split(torch.rand(16, 3, 32, 32, generator=generator), torch.randint(3, (16,), generator=generator),
                  torch.zeros(16, dtype=torch.long))
    dataset = RoutingDataset("tiny", ("a", "b", "c"), split, split, {}, SOURCES)
    torch.manual_seed(0)
    net = build_net(make_config("smoke", agent="actor"), 3)
    cost = skewed(net, net.junctions[0])
    traffic = make_traffic(4, dataset=dataset, net=net, k_cpt=1e-6, train=False, cost=cost)
    traffic.reset(np.random.default_rng(0))
    returns, rng = np.zeros(4), np.random.default_rng(1)
    checked = 0
    for _ in range(20):
        finished = traffic.move(rng.integers(2, size=4))
        returns += traffic.charge(finished)
        for slot, leaf, c_err in zip(finished.slots, finished.leaf, finished.c_err):
            assert returns[slot] == pytest.approx(-(1e-6 * float(cost.leaf[leaf]) + c_err), rel=1e-9)
            returns[slot] = 0.0
            checked += 1
        traffic.start(finished.slots, rng)
    assert checked > 4


def test_a_run_records_its_profile_and_a_resumed_run_reuses_it(tmp_path):
    config = make_config("smoke", agent="actor", cost="latency", latency_batch=4)
    net = build_net(config, 3)
    model = run_cost_model(config, net, tmp_path)
    saved = json.loads((tmp_path / COST_FILE).read_text())
    assert saved["unit"] == UNIT and saved["profile"]["batch_size"] == 4
    assert saved["node_cost"] == pytest.approx(model.node)
    again = run_cost_model(config, build_net(config, 3), tmp_path)
    assert again.node == model.node, "a resumed run charges the costs it was profiled with"
    assert run_cost_model(make_config("smoke", agent="actor"), net, tmp_path).unit == "MACs"
    with pytest.raises(ValueError, match="unknown cost 'joules'"):
        make_config("smoke", cost="joules")


def test_latency_points_are_matched_with_mac_points_of_equal_accuracy():
    from routing_rl.app.latency import matches

    def point(cost, k, accuracy, us, batch=64):
        return {"cost": cost, "k_cpt": k, "accuracy": accuracy, "seconds_per_image": us * 1e-6, "batch_size": batch}

    points = [point("macs", 0.0, 0.950, 100), point("macs", 4e-9, 0.947, 80), point("macs", 1.6e-8, 0.930, 50),
              point("latency", 4e-9, 0.949, 60), point("latency", 6.4e-8, 0.900, 30), point("macs", 4e-9, 0.949, 10, batch=1)]
    (found,) = matches(points)
    assert found["macs"]["k_cpt"] == 4e-9 and found["time_ratio"] == pytest.approx(60 / 80)


def test_figures_join_only_the_points_no_other_beats():
    from routing_rl.app.plots import frontier

    points = [{"us": 3.0, "accuracy": 0.93}, {"us": 1.0, "accuracy": 0.90}, {"us": 2.0, "accuracy": 0.85},
              {"us": 3.0, "accuracy": 0.95}, {"us": 4.0, "accuracy": 0.95}]
    assert [(p["us"], p["accuracy"]) for p in frontier(points, "us")] == [(1.0, 0.90), (3.0, 0.95)]
