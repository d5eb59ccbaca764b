import pytest
import torch
from helpers import vector_tree
from torch import nn

from routing_rl.core.graph import Node, RoutedNet, exit_confidence, take
from routing_rl.nets.router import Router, read_exit_confidence


def test_structure_is_read_off_a_generic_tree():
    net = vector_tree()
    assert net.order == ["root", "leafA", "mid", "leafB", "fork", "leafC", "leafD"]
    assert net.leaves == ["leafA", "leafB", "leafC", "leafD"]
    assert net.junctions == ["root", "fork"]
    assert net.parent["leafD"] == "fork" and net.parent["root"] is None
    assert net.path["leafB"] == [("root", 1)]
    assert net.path["leafD"] == [("root", 2), ("fork", 1)]
    assert net.nodes_to("leafD") == ["root", "fork", "leafD"]


def test_macs_of_a_generic_tree():
    net = vector_tree()
    assert net.macs == {"root": 48, "leafA": 24, "mid": 32, "leafB": 12, "fork": 40, "leafC": 15, "leafD": 15}
    router = 8 * 16 + 16 * 16 + 16 * 3
    assert net.router_macs["root"] == router
    assert net.path_macs("leafB") == 48 + router + 32 + 12
    assert net.leaf_macs.tolist() == [net.path_macs(leaf) for leaf in net.leaves]


def test_full_evaluation_of_vectors():
    net = vector_tree().eval()
    output = net(torch.rand(4, 6))
    assert sorted(output.logits) == sorted(net.leaves)
    assert output.scores["root"].shape == (4, 3) and output.scores["fork"].shape == (4, 2)


def leaf(n_in=2):
    return Node(nn.Linear(n_in, 2))


def test_missing_sink_is_named():
    with pytest.raises(ValueError, match="sink 'nowhere', which is not a node"):
        RoutedNet({"a": Node(nn.Identity(), ["b", "nowhere"], Router(2, 2)), "b": leaf()}, "a", (2,), 2)


def test_a_node_reached_twice_is_refused():
    nodes = {
        "a": Node(nn.Identity(), ["b", "c"], Router(2, 2)),
        "b": Node(nn.Identity(), ["c"]),
        "c": leaf(),
    }
    with pytest.raises(ValueError, match="reached twice"):
        RoutedNet(nodes, "a", (2,), 2)


def test_unreachable_nodes_and_unknown_root_are_named():
    with pytest.raises(ValueError, match=r"\['orphan'\] cannot be reached"):
        RoutedNet({"a": Node(nn.Identity(), ["b"]), "b": leaf(), "orphan": leaf()}, "a", (2,), 2)
    with pytest.raises(ValueError, match="root 'x' is not one of the nodes"):
        RoutedNet({"a": leaf()}, "x", (2,), 2)


def test_routers_exactly_at_junctions():
    with pytest.raises(ValueError, match="needs a router"):
        Node(nn.Identity(), ["a", "b"])
    with pytest.raises(ValueError, match="only belongs at a junction"):
        Node(nn.Identity(), ["a"], Router(2, 2))


def test_take_selects_examples_in_nested_states():
    state = {"maps": [torch.arange(4), torch.arange(8).view(4, 2)], "t": (torch.arange(4) * 10,)}
    picked = take(state, torch.tensor([3, 1]))
    assert picked["maps"][0].tolist() == [3, 1]
    assert picked["maps"][1].tolist() == [[6, 7], [2, 3]]
    assert picked["t"][0].tolist() == [30, 10]
    with pytest.raises(TypeError, match="cannot select examples"):
        take("text", torch.tensor([0]))


def test_take_keeps_channels_last_maps_channels_last():
    maps = torch.randn(5, 3, 4, 4).contiguous(memory_format=torch.channels_last)
    picked = take(maps, torch.tensor([4, 0, 2]))
    assert torch.equal(picked, maps[[4, 0, 2]])
    assert picked.is_contiguous(memory_format=torch.channels_last)
    assert take(maps.contiguous(), torch.tensor([1])).is_contiguous()


def test_leaf_macs_follow_the_module_to_its_device():
    net = vector_tree()
    assert net.leaf_macs.device == torch.device("cpu")
    assert "leaf_macs" not in net.state_dict()


def test_routers_read_their_exits_confidence_and_start_where_they_were():
    net = vector_tree().eval()
    x = torch.rand(5, 6)
    before = net(x)
    wide = read_exit_confidence(net).eval()
    after = wide(x)
    assert wide.exit_confidence and read_exit_confidence(wide) is wide
    assert [head for head in wide.nodes["fork"].exits] == [wide.nodes["leafC"], wide.nodes["leafD"]]
    assert after.descriptors["root"].shape == (5, 8 + 1) and after.descriptors["fork"].shape == (5, 5 + 2)
    root_state = wide.nodes["root"].transform(x)
    expected = before.logits["leafA"].softmax(1).amax(1).log()
    assert torch.allclose(after.descriptors["root"][:, -1], expected)
    assert torch.allclose(exit_confidence(before.logits["leafA"])[:, 0], expected)
    assert torch.equal(after.descriptors["root"][:, :8], wide.nodes["root"].descriptor(root_state))
    for junction in wide.junctions:  # the new inputs' weights start at zero
        assert torch.allclose(after.scores[junction], before.scores[junction])


def test_a_junction_pays_for_the_heads_its_router_reads():
    net = vector_tree()
    plain_router, plain_macs = dict(net.router_macs), dict(net.macs)
    wide = read_exit_confidence(net)
    assert wide.macs == plain_macs, "each head counted once at its leaf"
    # per confidence read: one weight per hidden unit, and its head
    assert wide.router_macs["root"] == plain_router["root"] + 1 * 16 + plain_macs["leafA"]
    assert wide.router_macs["fork"] == plain_router["fork"] + 2 * 16 + plain_macs["leafC"] + plain_macs["leafD"]
    assert wide.path_macs("leafB") == net.path_macs("leafB") + 16 + plain_macs["leafA"]


def test_routing_losses_do_not_reach_the_heads_through_their_confidence():
    wide = read_exit_confidence(vector_tree())
    with torch.no_grad():
        for layer in (0, -1):
            wide.nodes["root"].router.layers[layer].weight.normal_()
    wide(torch.rand(4, 6)).scores["root"][:, 0].pow(2).sum().backward()
    assert all(p.grad is None for p in wide.nodes["leafA"].parameters())
    assert wide.nodes["root"].router.layers[0].weight.grad[:, -1].abs().sum() > 0


def test_reading_exits_needs_routers_it_can_widen():
    class Scores(nn.Module):
        def forward(self, descriptor, k_cpt=None):
            return descriptor[:, :2]

    nodes = {"root": Node(nn.Linear(2, 3), ["a", "b"], Scores()), "a": leaf(3), "b": leaf(3)}
    with pytest.raises(ValueError, match="not a Router"):
        read_exit_confidence(RoutedNet(nodes, root="root", input_shape=(2,), classes=2))


def test_a_router_that_reads_k_cpt_keeps_its_k_cpt_weights_when_widened():
    net = vector_tree(k_cpt_input=True)
    with torch.no_grad():
        net.nodes["root"].router.layers[0].weight[:, -1].fill_(3.0)
    old = net.nodes["root"].router.layers[0].weight.clone()
    wide = read_exit_confidence(net)
    weight = wide.nodes["root"].router.layers[0].weight
    assert torch.equal(weight[:, :8], old[:, :8]) and torch.equal(weight[:, -1], old[:, -1])
    assert torch.equal(weight[:, 8], torch.zeros(16)), "the confidence's MLP weights start at zero"
    out = wide.eval()(torch.rand(3, 6), k_cpt=4e-9)
    assert out.scores["root"].shape == (3, 3)
