import pytest
import torch
from helpers import randomize_routers, varied_images, vector_tree

from routing_rl.core.execution import MIN_BATCH_STATISTICS, dynamic, follow, full, reach, route
from routing_rl.core.graph import take
from routing_rl.core.k_cpt import router_input
from routing_rl.nets.multiscale import chain, static, tree
from routing_rl.nets.router import read_exit_confidence


def assert_same_routing(net, x, k_cpt=None):
    with torch.no_grad():
        leaf, logits, macs = follow(net, full(net, x, k_cpt))
    routed = dynamic(net, x, k_cpt)
    assert torch.equal(routed.leaf, leaf)
    assert torch.equal(routed.pred, logits.argmax(1))
    assert torch.equal(routed.macs, macs)
    torch.testing.assert_close(routed.logits, logits)
    return routed


@pytest.mark.parametrize("build", [chain, tree])
@pytest.mark.parametrize("seed", [0, 1])
def test_dynamic_and_full_agree_in_float64(build, seed):
    torch.manual_seed(seed)
    x = varied_images(48, seed, torch.float64)
    net = randomize_routers(build().double(), x, seed).eval()
    routed = assert_same_routing(net, x)
    assert len(torch.unique(routed.leaf)) >= 3, "routing should spread examples over several leaves"


@pytest.mark.parametrize("build", [chain, tree])
def test_dynamic_and_full_agree_in_float32(build):
    torch.manual_seed(0)
    x = varied_images(64, 3)
    net = randomize_routers(build(), x, 3).eval()
    assert len(torch.unique(assert_same_routing(net, x).leaf)) >= 3


def test_dynamic_on_a_static_net_is_the_single_path():
    net = static(2).eval()
    x = torch.rand(4, 3, 32, 32)
    routed = dynamic(net, x)
    assert routed.leaf.tolist() == [0] * 4
    assert routed.macs.tolist() == [net.full_macs] * 4
    torch.testing.assert_close(routed.logits, net(x).logits["exit2"])


def test_per_example_macs_are_the_path_macs_of_the_leaf():
    x = varied_images(32, 1)
    net = randomize_routers(chain(), x, 1).eval()
    routed = dynamic(net, x)
    for leaf_index, macs in zip(routed.leaf.tolist(), routed.macs.tolist()):
        assert macs == net.path_macs(net.leaves[leaf_index])


def test_each_node_runs_only_on_the_examples_routed_to_it():
    x = varied_images(40, 2)
    net = randomize_routers(tree(), x, 2).eval()
    seen: dict[str, int] = {}
    for name in net.order:
        net.nodes[name].transform.register_forward_hook(
            lambda module, inputs, output, name=name: seen.__setitem__(name, seen.get(name, 0) + len(output[-1] if isinstance(output, list) else output))
        )
    routed = dynamic(net, x)
    assert seen == {name: index.numel() for name, index in routed.visits.items()}
    assert seen["col1"] == 40
    assert sum(seen[leaf] for leaf in net.leaves if leaf in seen) == 40
    assert len(seen) < len(net.order) / 2, "an argmax path visits at most 16 of the tree's 94 nodes"


def test_route_with_a_chosen_policy_and_gradients():
    net = vector_tree().train()
    x = torch.rand(12, 6)
    always = {"root": 2, "fork": 1}
    routed = route(net, x, lambda at: torch.full((len(at.index),), always[at.name]))
    assert routed.leaf.tolist() == [net.leaf_index["leafD"]] * 12
    assert set(routed.visits) == {"root", "fork", "leafD"}
    routed.logits.sum().backward()
    assert net.nodes["leafD"].transform.weight.grad is not None
    assert net.nodes["leafC"].transform.weight.grad is None


def test_route_splits_per_example_k_cpt_with_the_batch():
    net = vector_tree(k_cpt_input=True).eval()
    seen = []
    net.nodes["fork"].router.layers[0].register_forward_hook(lambda m, inputs, out: seen.append(inputs[0][:, -1]))
    k_cpt = torch.arange(8, dtype=torch.float32) * 1e-8
    seen_by_policy = {}

    def decide(at):
        seen_by_policy[at.name] = at
        return torch.arange(at.scores.shape[0]) % at.scores.shape[1]

    routed = route(net, torch.rand(8, 6), decide, k_cpt)
    at_fork = routed.visits["fork"]
    torch.testing.assert_close(seen[0], router_input(k_cpt[at_fork]))
    fork = seen_by_policy["fork"]
    assert torch.equal(fork.index, at_fork) and torch.equal(fork.k_cpt, k_cpt[at_fork])
    assert fork.descriptor.shape == (len(at_fork), 5)


def test_routing_responds_to_k_cpt():
    net = chain(k_cpt_input=True).eval()
    with torch.no_grad():
        for name in net.junctions:
            first, last = net.nodes[name].router.layers[0], net.nodes[name].router.layers[-1]
            first.weight.zero_()
            first.weight[:, -1] = 1.0
            last.weight[0].fill_(1.0)  # exit grows with k_cpt
            last.bias.copy_(torch.tensor([0.0, 1.0]))
    x = torch.rand(4, 3, 32, 32)
    cheap, dear = dynamic(net, x, 0.0), dynamic(net, x, 6.4e-8)
    assert cheap.leaf.tolist() == [7] * 4 and dear.leaf.tolist() == [0] * 4
    assert_same_routing(net, x, torch.tensor([0.0, 6.4e-8, 0.0, 6.4e-8]))


def test_reach_marks_the_examples_at_each_node():
    net = vector_tree()
    decisions = {"root": torch.tensor([0, 1, 2, 2]), "fork": torch.tensor([1, 1, 0, 1])}
    reached = reach(net, decisions, 4)
    assert reached["leafA"].tolist() == [True, False, False, False]
    assert reached["leafB"].tolist() == [False, True, False, False]
    assert reached["leafC"].tolist() == [False, False, True, False]
    assert reached["leafD"].tolist() == [False, False, False, True]


def test_routing_on_exit_confidence_matches_full_evaluation():
    net = read_exit_confidence(chain(classes=3))
    with torch.no_grad():
        for junction in net.junctions:  # routers that lean on the confidence
            net.nodes[junction].router.layers[0].weight[:, -1].normal_(0, 5)
    x = varied_images(16)
    randomize_routers(net, x).eval()
    routed = dynamic(net, x)
    leaf, logits, macs = follow(net, full(net, x))
    assert len(set(routed.leaf.tolist())) > 1, "the confidence should split the batch"
    assert torch.equal(routed.leaf, leaf) and torch.allclose(routed.logits, logits, atol=1e-5)
    assert torch.equal(routed.macs, macs)


def _send_to_col2(examples: int):
    """A training decision: the first ``examples`` images go on to col2, the rest exit at exit1;
    every image past col2 exits at exit2."""
    def decide(junction):
        choice = torch.zeros_like(junction.index)
        if junction.name == "col1":
            choice[:examples] = 1
        return choice
    return decide


def _norm_buffers(node):
    return [b.clone() for name, b in node.named_buffers() if "running" in name]


@pytest.mark.parametrize("examples", sorted({1, MIN_BATCH_STATISTICS - 1}))
def test_a_sub_batch_too_small_for_statistics_is_normalised_with_the_running_statistics(examples):
    torch.manual_seed(0)
    x = varied_images(16, 4)
    net = chain().train()
    col2 = net.nodes["col2"]
    before = _norm_buffers(col2)
    routed = route(net, x, _send_to_col2(examples), side_heads=True)
    assert routed.visits["col2"].numel() == examples
    assert all(torch.equal(a, b) for a, b in zip(before, _norm_buffers(col2))), "the running statistics moved"
    inputs = take(col2.reads(net.nodes["col1"](x).state), routed.visits["col2"])
    with torch.no_grad():
        expected = col2.eval()(inputs).state
    torch.testing.assert_close(routed.heads["exit2"][1], net.nodes["exit2"].eval()(expected).state)


def test_a_sub_batch_of_the_minimum_size_is_normalised_with_its_own_statistics():
    torch.manual_seed(0)
    x = varied_images(16, 4)
    net = chain().train()
    col2 = net.nodes["col2"]
    before = _norm_buffers(col2)
    route(net, x, _send_to_col2(MIN_BATCH_STATISTICS), side_heads=True)
    assert not all(torch.equal(a, b) for a, b in zip(before, _norm_buffers(col2)))
    assert all(m.training for m in net.modules()), "route() restores every batch norm's training mode"


def test_a_sub_batch_too_small_for_statistics_trains_nothing_on_its_path():
    torch.manual_seed(0)
    x = varied_images(16, 4)
    net = chain().train()
    routed = route(net, x, _send_to_col2(1), side_heads=True)
    loss = sum(logits.square().sum() for _, logits in routed.heads.values())
    loss.backward()
    untouched = [p.grad for n in ("col2", "exit2") for p in net.nodes[n].parameters()]
    assert all(g is None for g in untouched), "the lone example trained col2 or its head"
    assert all(p.grad is not None for p in net.nodes["col1"].transform.parameters())
