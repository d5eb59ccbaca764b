import pytest
import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.k_cpt import router_input
from routing_rl.nets.multiscale import COLUMN_CHANNELS, Column, build, chain, image_pyramid, max_pool_halve, static, tree
from routing_rl.nets.router import Router


def column_names(net):
    return [n for n in net.order if n.startswith("col")]


def test_static_8_macs_are_exact():
    net = static(8)
    convolutions = sum(net.macs[n] for n in column_names(net))
    assert convolutions == 20_530_944
    assert net.macs["exit8"] == 4 * 4 * 128 * 10 == 20_480
    assert net.full_macs == 20_551_424
    assert net.leaf_macs.tolist() == [20_551_424]


def test_static_1_macs_are_exact():
    net = static(1)
    assert net.full_macs == 1_364_224
    assert net.macs["col1"] == 1_361_664


def test_column_macs_follow_the_conv_formula():
    # column 3 reads column 2's 16-channel maps at 16, 8, 4 px and writes 32 channels
    expected = 16 * 16 * 9 * 16 * 32 + 8 * 8 * 9 * (16 * 32 + 32 * 32) + 4 * 4 * 9 * (16 * 32 + 32 * 32)
    assert static(3).macs["col3"] == expected


def test_chain_columns_cost_what_static_columns_cost_and_routers_add_up():
    net, reference = chain(), static(8)
    for name in column_names(reference):
        assert net.macs[name] == reference.macs[name]
    for k in range(1, 8):
        channels = COLUMN_CHANNELS[k - 1][-1]
        assert net.router_macs[f"col{k}"] == 16 * channels * 16 + 16 * 16 + 16 * 2
    assert net.router_macs["col8"] == 0
    assert net.leaf_macs[-1] == reference.full_macs + sum(net.router_macs.values())


def test_k_cpt_input_adds_one_router_input():
    assert chain(k_cpt_input=True).router_macs["col1"] == chain().router_macs["col1"] + 16


def test_exit_confidence_widens_every_router_by_its_exits_and_keeps_the_weights():
    torch.manual_seed(0)
    plain = build("chain", classes=3, k_cpt_input=True)
    torch.manual_seed(0)
    reading = build("chain", classes=3, k_cpt_input=True, exit_confidence=True)
    assert reading.exit_confidence and not plain.exit_confidence
    for junction in plain.junctions:
        narrow, wide = plain.nodes[junction].router.layers[0], reading.nodes[junction].router.layers[0]
        assert wide.in_features == narrow.in_features + 1, "a chain junction has one exit among its sinks"
        assert torch.equal(wide.weight[:, :-2], narrow.weight[:, :-1]) and torch.equal(wide.weight[:, -1], narrow.weight[:, -1])
        assert not wide.weight[:, -2].any(), "the confidence's weights start at zero, before k_cpt's"
    with pytest.raises(ValueError, match="drop exit_confidence"):
        build("static-2", exit_confidence=True)


def test_tree_structure():
    net = tree()
    columns = column_names(net)
    assert len(columns) == 1 + 2 + 4 + 8 * 5 == 47
    assert len(net.leaves) == 47
    assert max(sum(n.startswith("col") for n in net.nodes_to(leaf)) for leaf in net.leaves) == 8
    for k in (1, 2, 3):
        for name in columns:
            if name.startswith(f"col{k}"):
                assert len(net.nodes[name].sinks) == 3 and net.nodes[name].router.n_sinks == 3
    assert len({id(net.nodes[n].transform) for n in columns}) == 47
    assert 5.5 < net.full_macs / chain().full_macs < 6.5


def test_width_multiplies_channels():
    narrow, wide = static(2), static(2, width=2)
    assert wide.nodes["col2"].transform.convs[0].out_channels == 32
    assert wide.macs["col2"] == 4 * narrow.macs["col2"]


def test_shapes_of_columns_heads_and_scores():
    net = chain(classes=7).eval()
    x = torch.rand(5, 3, 32, 32)
    pyramid = net.nodes["col1"].transform(x)
    assert [tuple(t.shape) for t in pyramid] == [(5, 16, 32, 32), (5, 16, 16, 16), (5, 16, 8, 8), (5, 16, 4, 4)]
    col3 = net.nodes["col3"].transform(net.nodes["col2"].transform(pyramid))
    assert [tuple(t.shape) for t in col3] == [(5, 32, 16, 16), (5, 32, 8, 8), (5, 32, 4, 4)]
    output = net(x)
    assert set(output.logits) == set(net.leaves)
    assert all(t.shape == (5, 7) for t in output.logits.values())
    assert set(output.scores) == set(net.junctions)
    assert all(t.shape == (5, 2) for t in output.scores.values())


def test_image_pyramid_is_bilinear_halving():
    x = torch.rand(2, 3, 32, 32)
    pyramid = image_pyramid(x)
    assert [t.shape[-1] for t in pyramid] == [32, 16, 8, 4]
    for finer, coarser in zip(pyramid, pyramid[1:]):
        bilinear = nn.functional.interpolate(finer, scale_factor=0.5, mode="bilinear", align_corners=False)
        torch.testing.assert_close(coarser, bilinear)


def test_initialisation_follows_the_paper():
    net = chain()
    for name in net.junctions:
        last = net.nodes[name].router.layers[-1]
        assert torch.count_nonzero(last.weight) == 0 and torch.count_nonzero(last.bias) == 0
    for module in net.modules():
        if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
            assert module.eps == 1e-6 and module.momentum == pytest.approx(0.1)
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.bias is not None:
            assert torch.count_nonzero(module.bias) == 0
    assert net.nodes["col2"].transform.convs[0].weight.std() > 0


def test_fresh_routers_score_every_sink_equally():
    net = tree().eval()
    scores = net(torch.rand(3, 3, 32, 32)).scores
    assert all(torch.count_nonzero(s) == 0 for s in scores.values())


def test_router_reads_k_cpt_in_doublings_of_the_papers_smallest():
    router = Router(4, 2, k_cpt_input=True).eval()
    seen = []
    router.layers[0].register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    descriptor = torch.rand(3, 4)
    router(descriptor, 3e-9)
    router(descriptor, torch.tensor([0.0, 1e-9, 6.3e-8]))
    torch.testing.assert_close(seen[0], torch.cat([descriptor, torch.full((3, 1), 2.0)], 1))
    torch.testing.assert_close(seen[1][:, -1], torch.tensor([0.0, 1.0, 6.0]))


def test_router_in_eval_mode_computes_what_its_layers_compute():
    """Without gradients an eval-mode router folds batch norm into its linear layers; the
    folding follows every change of the weights and statistics."""
    torch.manual_seed(0)
    router = Router(4, 3, k_cpt_input=True).train()
    torch.nn.init.normal_(router.layers[-1].weight)
    for _ in range(3):  # running statistics away from their initial values
        router(torch.randn(8, 4) * 3 + 1, torch.rand(8) * 1e-7)
    router.eval()
    descriptor, k_cpt = torch.randn(5, 4), torch.rand(5) * 1e-7

    def layers():
        weight = router.layers[0].weight
        return router.layers(torch.cat([descriptor.to(weight), router_input(k_cpt.to(weight)).unsqueeze(1)], 1))

    with torch.no_grad():
        torch.testing.assert_close(router(descriptor, k_cpt), layers())
        router.layers[1].running_mean.add_(0.5)
        router.layers[0].weight.mul_(2)
        torch.testing.assert_close(router(descriptor, k_cpt), layers())
        router.double()
    with torch.inference_mode():
        torch.testing.assert_close(router(descriptor.double(), k_cpt.double()), layers())
    scores = router(descriptor.double(), k_cpt.double())
    assert scores.requires_grad, "with gradients on, the router runs its layers"


@pytest.mark.parametrize("shape", [(3, 4, 8, 8), (1, 4, 8, 8), (2, 3, 5, 6)])
def test_max_pool_halve_is_max_pooling(shape):
    x = torch.randn(shape).contiguous(memory_format=torch.channels_last)
    x[0, 0, :2, :2] = 1.0  # ties
    assert torch.equal(max_pool_halve(x), F.max_pool2d(x, 2))


def test_column_in_eval_mode_computes_what_its_layers_compute():
    """Without gradients an eval-mode column folds batch norm into its convolutions; the
    folding follows every change of the weights and statistics, and hooks see the layers."""
    torch.manual_seed(0)
    column = Column([16, 16, 16], [32, 32]).train()
    pyramid = [torch.randn(4, 16, 8, 8), torch.randn(4, 16, 4, 4), torch.randn(4, 16, 2, 2)]
    for _ in range(3):  # running statistics away from their initial values
        column([p * 2 + 1 for p in pyramid])
    column.eval()

    def check():
        expected = column(pyramid)  # gradients on: the modules run
        with torch.no_grad():
            for folded, plain in zip(column(pyramid), expected):
                torch.testing.assert_close(folded, plain.detach())

    check()
    with torch.no_grad():
        column.norms[1].running_var.mul_(3)
        column.links[0].weight.add_(0.1)
    check()
    other = Column([16, 16, 16], [32, 32]).train()
    other([p * 3 for p in pyramid])
    column.load_state_dict(other.state_dict(), assign=True)
    check()
    seen = []
    column.convs[0].register_forward_hook(lambda module, inputs, output: seen.append(output.shape))
    with torch.no_grad():
        column(pyramid)
    assert seen == [(4, 32, 4, 4)]


def test_router_ignores_k_cpt_unless_built_to_read_it():
    router = Router(4, 2).eval()
    descriptor = torch.rand(3, 4)
    torch.testing.assert_close(router(descriptor, 1e-8), router(descriptor))


@pytest.mark.parametrize("bad", ["foo", "static-0", "static-9", "Chain", "", None])
def test_unknown_arch_names_the_choices(bad):
    with pytest.raises(ValueError, match="unknown arch .*choose one of static-1"):
        build(bad)


@pytest.mark.parametrize("width", [0, -1, 1.5, True])
def test_bad_width_is_refused(width):
    with pytest.raises(ValueError, match="width must be a positive integer"):
        build("chain", width=width)


def test_bad_classes_and_static_k_cpt_are_refused():
    with pytest.raises(ValueError, match="classes must be an integer >= 2"):
        chain(classes=1)
    with pytest.raises(ValueError, match="static net has no routers"):
        build("static-3", k_cpt_input=True)


@pytest.mark.parametrize("shape", [(2, 3, 28, 28), (2, 1, 32, 32), (3, 32, 32)])
def test_wrong_input_size_names_the_expected_shape(shape):
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, 3, 32, 32\)"):
        chain()(torch.zeros(shape))


def test_missing_k_cpt_is_explained():
    with pytest.raises(ValueError, match="pass k_cpt="):
        chain(k_cpt_input=True)(torch.zeros(2, 3, 32, 32))


def test_column_refuses_more_scales_than_its_input_has():
    with pytest.raises(ValueError, match="needs that many input scales"):
        Column([16, 16], [32, 32, 32])


def test_router_trains_on_a_lone_example():
    router = Router(4, 3).train()
    assert router(torch.rand(1, 4)).shape == (1, 3)
    assert router(torch.rand(5, 4)).shape == (5, 3)
