import copy

import pytest
import torch
from helpers import vector_tree

from routing_rl.agents.actor import ActorLearner
from routing_rl.agents.critic import CriticLearner
from routing_rl.training.config import make_config
from routing_rl.data import Split
from routing_rl.core.talr import NodeGradients, talr_scales


def test_scales_are_one_over_root_mean_square():
    reach = torch.tensor([[1.0, 0.5, 0.0], [0.0, 0.5, 0.0]])
    scales = talr_scales(reach, floor=1e-3)
    torch.testing.assert_close(scales, torch.tensor([2**0.5, 2.0, 1e3], dtype=torch.float64))


def test_node_gradients_are_scaled_per_node():
    net = vector_tree()
    net(torch.rand(4, 6)).logits["leafC"].sum().backward()
    before = {name: [p.grad.clone() if p.grad is not None else None for p in net.nodes[name].parameters()] for name in net.order}
    NodeGradients(net).scale(torch.arange(1.0, 8.0))
    for k, name in enumerate(net.order):
        for p, old in zip(net.nodes[name].parameters(), before[name]):
            if old is not None:
                torch.testing.assert_close(p.grad, old * (k + 1))


def batch(n=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return Split(torch.rand(n, 6, generator=generator, dtype=torch.float64),
                 torch.randint(0, 3, (n,), generator=generator), torch.zeros(n, dtype=torch.long))


def first_updates(make_learner, talr: bool, data: Split):
    """Parameter change of one SGD step (momentum starts empty: the change is -lr · grad)."""
    learner = make_learner(talr)
    before = {n: p.detach().clone() for n, p in learner.net.named_parameters()}
    learner.train_step(data, 0)
    return learner, {n: before[n] - p.detach() for n, p in learner.net.named_parameters()}


def assert_updates_scaled(net, plain, scaled, factor):
    checked = 0
    for k, name in enumerate(net.order):
        for param_name, _ in net.nodes[name].named_parameters():
            key = f"nodes.{name}.{param_name}"
            if plain[key].abs().max() > 0:
                torch.testing.assert_close(scaled[key], plain[key] * factor[k], rtol=1e-9, atol=1e-15)
                checked += 1
    assert checked > 10


def test_actor_update_of_each_node_is_scaled_by_one_over_root_mean_square_reach():
    torch.manual_seed(0)
    net = vector_tree().double()
    with torch.no_grad():  # scores away from zero so that reach differs between nodes
        for name in net.junctions:
            net.nodes[name].router.layers[-1].weight.normal_()
    data = batch()

    def make(talr):
        return ActorLearner(copy.deepcopy(net), make_config("smoke", agent="actor", talr=talr), torch.device("cpu"))

    learner = make(True)
    reach = learner.losses(data, 0)["reach"].detach()
    expected = 1 / reach.square().mean(0).sqrt()
    assert expected.max() > 1.5, "some node should be reached with low probability"
    _, plain = first_updates(make, False, data)
    _, scaled = first_updates(make, True, data)
    assert_updates_scaled(net, plain, scaled, expected)


def test_sampled_critic_scales_by_the_fraction_of_the_batch_through_each_node():
    torch.manual_seed(1)
    net = vector_tree().double()
    data = batch(32, 1)

    def make(talr):
        config = make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", epsilon=1.0, talr=talr)
        return CriticLearner(copy.deepcopy(net), config, torch.device("cpu"))

    # both learners draw the same paths: their generators start from the same seed
    _, plain = first_updates(make, False, data)
    _, scaled = first_updates(make, True, data)
    fraction = make(True).losses(data, 0)["reach"].mean(0)
    assert 0 < fraction.min() < 0.5
    assert_updates_scaled(net, plain, scaled, 1 / fraction.sqrt())


def test_a_node_nobody_reaches_is_guarded_by_the_floor():
    assert talr_scales(torch.zeros(3, 1), floor=1e-6).item() == pytest.approx(1e6)
