"""Oracle routing: the cheapest routing at each accuracy, and its independence of the cost model's scale."""

import pytest
import torch

from routing_rl.core.execution import dynamic, full, route
from routing_rl.core.oracle import PathPolicy, leaf_correct, oracle_leaves
from routing_rl.nets.multiscale import chain, tree

LEAF_COST = torch.tensor([1.0, 2.0, 4.0])
CORRECT = torch.tensor([
    [True, True, True],     # right at the cheapest leaf: free
    [False, False, True],   # right only at the dearest: 3 over the cheapest
    [False, True, True],    # 1 over the cheapest
    [False, False, False],  # never right
])


def test_the_oracle_keeps_the_examples_cheapest_to_get_right_first():
    mean_cost = [float(LEAF_COST[oracle_leaves(CORRECT, LEAF_COST, right)].mean()) for right in range(4)]
    assert mean_cost == pytest.approx([1.0, 1.0, 1.25, 2.0])


def test_the_oracle_routes_what_it_keeps_to_the_cheapest_correct_leaf_and_the_rest_to_the_cheapest():
    assert oracle_leaves(CORRECT, LEAF_COST, 2).tolist() == [0, 0, 1, 0]
    assert oracle_leaves(CORRECT, LEAF_COST, 3).tolist() == [0, 2, 1, 0]
    with pytest.raises(ValueError, match="between 0 and 3"):
        oracle_leaves(CORRECT, LEAF_COST, 4)


def test_cost_models_that_rank_the_leaves_alike_give_the_same_routing_at_every_accuracy():
    generator = torch.Generator().manual_seed(0)
    correct = torch.rand(300, 6, generator=generator) < torch.linspace(0.3, 0.9, 6)  # deeper heads right more often
    macs = torch.tensor([1.0, 2.5, 4.0, 6.0, 8.5, 11.0])
    seconds = torch.tensor([3.0, 4.0, 5.0, 6.1, 7.0, 7.5]) * 1e-4  # dear first column, cheap deep ones: same order
    reordered = torch.tensor([1.0, 2.5, 4.0, 9.0, 8.5, 11.0])  # leaves 3 and 4 swap places
    right = int(correct.any(1).sum())
    assert all(torch.equal(oracle_leaves(correct, macs, n), oracle_leaves(correct, seconds, n)) for n in range(right + 1))
    assert any(not torch.equal(oracle_leaves(correct, macs, n), oracle_leaves(correct, reordered, n)) for n in range(right + 1))


@pytest.mark.parametrize("build", [chain, tree], ids=["chain", "tree"])
def test_a_path_policy_sends_every_example_to_its_leaf(build):
    torch.manual_seed(0)
    net = build().eval()
    x = torch.rand(9, 3, 32, 32)
    leaf = torch.arange(9) % len(net.leaves)
    with torch.no_grad():
        routed = route(net, x, PathPolicy(net).decide(leaf))
    assert torch.equal(routed.leaf, leaf)
    assert torch.equal(routed.macs, net.leaf_macs[leaf])


def test_leaf_correctness_agrees_with_dynamic_execution():
    torch.manual_seed(0)
    net = chain().eval()
    x, labels = torch.rand(12, 3, 32, 32), torch.randint(10, (12,))
    correct = leaf_correct(net, x, labels, batch_size=5)
    routed = dynamic(net, x)
    assert correct.shape == (12, len(net.leaves))
    assert torch.equal(correct[torch.arange(12), routed.leaf], routed.pred == labels)


def test_the_oracle_spends_no_more_than_the_nets_own_routing_for_as_many_right():
    from routing_rl.app.latency import oracle_point
    from routing_rl.core.k_cpt import CostModel

    torch.manual_seed(0)
    net = chain().eval()
    x = torch.rand(40, 3, 32, 32) * torch.linspace(0.1, 3.0, 40).view(-1, 1, 1, 1)
    last = net.nodes["col1"].router.layers[-1]
    with torch.no_grad():  # the darker half of the images exits at column 1
        torch.nn.init.normal_(last.weight)
        scores = full(net, x).scores["col1"]
        last.bias[0] = (scores[:, 1] - scores[:, 0]).median()
        routed = dynamic(net, x)
    labels = torch.where(torch.arange(40) % 2 == 0, routed.pred, (routed.pred + 1) % 10)  # half of them right
    point = oracle_point(net, x, labels, 0.0, CostModel.macs(net))
    assert point["oracle_accuracy"] >= 0.5 and point["oracle_same_as_macs"]
    assert point["oracle_mean_macs"] <= routed.macs.double().mean().item()
    assert len(set(routed.leaf.tolist())) > 1, "the test needs a routing that is not all one exit"
