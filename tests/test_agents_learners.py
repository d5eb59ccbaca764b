import io
import math

import pytest
import torch

from routing_rl.agents.registry import make_learner
from routing_rl.training.config import make_config
from routing_rl.core.k_cpt import K_CPT_VALUES
from routing_rl.data import Split
from routing_rl.training.evaluate import evaluate

CPU = torch.device("cpu")
COMMON_TAGS = {"losses/c_err", "losses/c_mod", "losses/total", "charts/lr", "charts/train_accuracy"}


def images(n=4, seed=0, classes=3):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, 32, 32, generator=generator) * torch.rand(n, 1, 1, 1, generator=generator) * 2
    return Split(x, torch.randint(0, classes, (n,), generator=generator), torch.zeros(n, dtype=torch.long))


CASES = [
    (dict(agent="static", arch="static-2"), {"losses/c_cpt", "charts/train_mean_macs"}),
    (dict(agent="actor", arch="chain"), {"losses/c_cpt", "losses/c_dec", "charts/tau", "charts/train_mean_macs"}),
    (dict(agent="actor", arch="chain", k_cpt="dynamic"), {"losses/c_dec", "charts/tau"}),
    (dict(agent="critic", arch="chain"), {"losses/c_ure", "charts/tau"}),
    (dict(agent="critic", arch="chain", policy="eps-greedy"), {"losses/c_ure", "charts/epsilon"}),
    (dict(agent="optimistic-critic", arch="tree", policy="greedy"), {"losses/c_ure"}),
    (dict(agent="threshold", arch="chain"), set()),
    (dict(agent="actor", arch="chain", exit_confidence=True), {"losses/c_dec"}),
    (dict(agent="critic", arch="chain", policy="eps-greedy", exit_confidence=True), {"losses/c_ure"}),
    (dict(agent="optimistic-critic", arch="tree", policy="greedy", exit_confidence=True), {"losses/c_ure"}),
]


@pytest.mark.parametrize("overrides, tags", CASES, ids=lambda case: "-".join(map(str, case.values())) if isinstance(case, dict) else "")
def test_every_learner_trains_resumes_and_evaluates(overrides, tags):
    config = make_config("smoke", **overrides)
    learner = make_learner(config, 3, CPU)
    stats = learner.train_step(images(), 0)
    assert COMMON_TAGS | tags <= set(stats)
    assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values())

    saved = io.BytesIO()
    torch.save(learner.state_dict(), saved)
    resumed = make_learner(config, 3, CPU)
    resumed.load_state_dict(torch.load(io.BytesIO(saved.getvalue()), weights_only=True))
    batch = images(seed=1)
    assert resumed.train_step(batch, 1) == learner.train_step(batch, 1), "a resumed learner continues identically"
    for a, b in zip(learner.net.parameters(), resumed.net.parameters()):
        assert torch.equal(a, b)

    for k_cpt in learner.eval_k_cpts():
        result = evaluate(learner.net, images(5, seed=2), k_cpt, learner.decide(k_cpt))
        assert 0.0 <= result["accuracy"] <= 1.0 and result["mean_macs"] > 0


def test_a_dynamic_k_cpt_net_is_evaluated_at_every_paper_value():
    learner = make_learner(make_config("smoke", agent="actor", k_cpt="dynamic"), 3, CPU)
    assert learner.net.k_cpt_input
    assert learner.eval_k_cpts() == list(K_CPT_VALUES)
    k_cpt = learner.sample_k_cpt(64)
    assert set(k_cpt.tolist()) <= set(torch.tensor(K_CPT_VALUES).tolist()) and len(set(k_cpt.tolist())) > 4


def test_nets_are_seeded_from_the_config():
    a = make_learner(make_config("smoke", agent="actor", seed=3), 3, CPU)
    b = make_learner(make_config("smoke", agent="actor", seed=3), 3, CPU)
    c = make_learner(make_config("smoke", agent="actor", seed=4), 3, CPU)
    weight = "nodes.col1.transform.convs.0.weight"
    assert torch.equal(a.net.state_dict()[weight], b.net.state_dict()[weight])
    assert not torch.equal(a.net.state_dict()[weight], c.net.state_dict()[weight])


@pytest.mark.parametrize("agent, arch, message", [
    ("static", "chain", "static-N"),
    ("actor", "static-3", "chain or tree"),
    ("critic", "static-1", "chain or tree"),
])
def test_wrong_architectures_are_refused(agent, arch, message):
    with pytest.raises(ValueError, match=message):
        make_learner(make_config("smoke", agent=agent, arch=arch), 3, CPU)


def test_routers_read_exit_confidence_when_asked():
    plain = make_learner(make_config("smoke", agent="critic", arch="tree"), 3, CPU).net
    reading = make_learner(make_config("smoke", agent="critic", arch="tree", exit_confidence=True), 3, CPU).net
    assert reading.exit_confidence and not plain.exit_confidence
    for junction in plain.junctions:
        extra = reading.nodes[junction].router.layers[0].in_features - plain.nodes[junction].router.layers[0].in_features
        assert extra == 1, "every junction of the tree has one exit among its sinks"
    assert reading.path_macs("exit8aaa") > plain.path_macs("exit8aaa")


@pytest.mark.parametrize("agent", ["static", "threshold"])
def test_exit_confidence_is_refused_where_no_router_of_ours_trains(agent):
    with pytest.raises(ValueError, match="drop it"):
        make_config("smoke", agent=agent, arch="static-2" if agent == "static" else "chain", exit_confidence=True)


def test_a_zero_one_training_error_is_refused_where_the_heads_would_learn_nothing():
    with pytest.raises(ValueError, match="no gradient"):
        make_learner(make_config("smoke", agent="static", arch="static-1", error_cost="zero_one"), 3, CPU)


def test_static_learner_fits_a_small_batch():
    learner = make_learner(make_config("smoke", agent="static", arch="static-1", lr=0.02), 2, CPU)
    batch = images(16, classes=2)
    first = learner.train_step(batch, 0)
    for i in range(1, 25):
        last = learner.train_step(batch, i)
    assert last["losses/c_err"] < first["losses/c_err"] / 2
    assert last["charts/train_accuracy"] == 1.0
