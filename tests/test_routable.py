"""routable(): exits and routers on torchvision classifiers and a user's own, MACs checked by
FlopCounterMode, refusals of what cannot be split, trained weights loaded."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.feature_extraction import get_graph_node_names

from routing_rl.core.execution import dynamic
from routing_rl.nets import resnet
from routing_rl.nets.routable import RoutableError, load_backbone, routable
from helpers import randomize_routers, varied_images

SHAPE = (3, 32, 32)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), ["layer1", "layer2", "layer3"]),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), ["features.3", "features.8"]),
}


def flop_macs(module: nn.Module, x: torch.Tensor) -> float:
    """MACs per example by torch's own counter: FLOPs / 2 (convolutions and matrix products)."""
    with torch.no_grad(), FlopCounterMode(display=False) as flops:
        module(x)
    return flops.get_total_flops() / 2 / x.shape[0]


@pytest.fixture(params=list(MODELS))
def wrapped(request):
    torch.manual_seed(0)
    make, exits = MODELS[request.param]
    model = make().eval()
    return model, exits, routable(model, exits, SHAPE).eval()


def test_the_deepest_exit_is_the_model_itself(wrapped):
    model, exits, net = wrapped
    assert net.leaves == [f"exit{k}" for k in range(1, len(exits) + 2)] and net.classes == 10
    x = torch.randn(2, *SHAPE)
    torch.testing.assert_close(net(x).logits[net.leaves[-1]], model(x))
    assert net.nodes[net.leaves[-1]].transform is not None and not net.nodes[net.leaves[-1]].sinks


def test_each_segment_costs_what_torch_s_flop_counter_says(wrapped):
    model, exits, net = wrapped
    x = torch.randn(2, *SHAPE)
    deepest = net.nodes_to(net.leaves[-1])
    assert sum(net.macs[name] for name in deepest) == flop_macs(model, x), "the model's MACs, split"
    state = x
    for name in deepest:
        transform = net.nodes[name].transform
        assert net.macs[name] == flop_macs(transform, state), name
        with torch.no_grad():
            state = transform(state)
    for k, name in enumerate(net.junctions, start=1):
        head = net.nodes[f"exit{k}"].transform
        assert net.macs[f"exit{k}"] == head.linear.in_features * 10
        assert net.router_macs[name] == head.linear.in_features * 16 + 16 * 16 + 16 * 2


def test_routed_execution_skips_segments_and_agrees_with_full_evaluation(wrapped):
    _, _, net = wrapped
    x = varied_images(12)
    randomize_routers(net, x)
    routed = dynamic(net, x)
    assert len(set(routed.leaf.tolist())) > 1
    full = net(x)
    for i, leaf in enumerate(routed.leaf.tolist()):
        torch.testing.assert_close(routed.logits[i], full.logits[net.leaves[leaf]][i], rtol=1e-4, atol=1e-4)
    assert routed.macs.tolist() == [net.leaf_path_macs[leaf] for leaf in routed.leaf.tolist()]


def test_a_lone_training_example_is_normalised_with_the_running_statistics():
    net = routable(torchvision.models.resnet18(num_classes=10), ["layer3"], SHAPE).train()
    last_norm = net.nodes["exit2"].transform.graph.get_submodule("layer4_1_bn2")  # 1×1 maps on 32×32 images
    before = last_norm.running_mean.clone()
    logits = net(torch.randn(1, *SHAPE)).logits["exit2"]  # torch's batch norm refuses one value per channel
    assert logits.shape == (1, 10) and torch.equal(last_norm.running_mean, before) and last_norm.training
    net(torch.randn(2, *SHAPE))
    assert not torch.equal(last_norm.running_mean, before), "batches of two or more train the statistics as usual"


def test_a_trained_model_s_weights_are_the_wrapper_s():
    torch.manual_seed(1)
    trained = torchvision.models.resnet18(num_classes=10).eval()
    state = {k: v.clone() for k, v in trained.state_dict().items()}
    model = torchvision.models.resnet18(num_classes=10)
    model.load_state_dict(state)
    net = routable(model, ["layer2"], SHAPE).eval()
    x = torch.randn(2, *SHAPE)
    torch.testing.assert_close(net(x).logits["exit2"], trained(x))


class Residual(nn.Module):
    """A user's own net: a stem, a residual block, a classifier."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.conv = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4, 10)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = h + self.conv(h)
        return self.head(h.mean((2, 3)))


class Branching(Residual):
    def forward(self, x):
        if x.sum() > 0:
            return super().forward(x)
        return self.head(x.mean((2, 3)).repeat(1, 2)[:, :4])


class AuxiliaryInTraining(Residual):
    def forward(self, x):
        out = super().forward(x)
        return out + self.head(x.mean((2, 3)).repeat(1, 2)[:, :4]) if self.training else out


class TwoOutputs(Residual):
    def forward(self, x):
        h = torch.relu(self.stem(x))
        return self.head(h.mean((2, 3))), h


REFUSED = [
    (Residual, ["conv"], "a skip connection crosses"),  # between the block's input and its addition
    (Residual, ["nowhere"], "is not a node of Residual"),
    (Residual, ["head"], "is the model's output"),
    (Residual, ["stem", "stem"], "named twice"),
    (Branching, ["stem"], "torch.fx cannot trace Branching"),
    (AuxiliaryInTraining, ["stem"], "other operations in training than in eval mode"),
    (TwoOutputs, ["stem"], "returns a tuple, not one logits tensor"),
    (Residual, [], "at least one exit"),
]


@pytest.mark.parametrize("model, exits, words", REFUSED, ids=[words for _, _, words in REFUSED])
def test_what_cannot_be_split_is_refused_with_one_line(model, exits, words):
    with pytest.raises(RoutableError, match=words) as refused:
        routable(model(), exits, SHAPE)
    assert "\n" not in str(refused.value)


def test_a_user_s_own_net_splits_after_its_residual_addition():
    model = Residual().eval()
    net = routable(model, ["add"], SHAPE, classes=10)
    assert net.leaves == ["exit1", "exit2"] and net.macs["seg1"] == 32 * 32 * 9 * 4 * (3 + 4)
    with pytest.raises(RoutableError, match="predicts 10 classes, not classes=5"):
        routable(model, ["add"], SHAPE, classes=5)


class LayerScaled(Residual):
    """A residual block whose branch a parameter scales (ConvNeXt's layer scale): the forward
    reads the parameter as an attribute, not through a module."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((4, 1, 1), 0.5))

    def forward(self, x):
        h = torch.relu(self.stem(x))
        h = h + self.scale * self.conv(h)
        return self.head(h.mean((2, 3)))


def test_a_parameter_read_as_an_attribute_after_an_exit_stays_the_model_s():
    torch.manual_seed(0)
    model = LayerScaled().eval()
    net = routable(model, ["stem"], SHAPE).eval()
    x = varied_images(3)
    torch.testing.assert_close(net(x).logits["exit2"], model(x))
    assert any(p is model.scale for p in net.parameters()), "training the net trains the model's own scale"


def tiny_vit() -> nn.Module:
    """A ViT on 32×32 images: 16 patches of 8×8 and a class token, 2 layers of width 16."""
    torch.manual_seed(0)
    return torchvision.models.vision_transformer.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32, num_classes=10).eval()


@pytest.mark.parametrize("layer", ["encoder.layers.encoder_layer_0", "encoder.ln"])
def test_an_exit_on_a_transformer_s_tokens_is_refused_with_one_line(layer):
    with pytest.raises(RoutableError, match=rf"exit '{layer}' gives \(17, 16\) per example, not a feature map") as refused:
        routable(tiny_vit(), [layer], SHAPE)
    assert "\n" not in str(refused.value)


def test_a_transformer_exits_on_its_class_token():
    model = tiny_vit()
    class_token = get_graph_node_names(model)[1][-2]  # the encoder's first token, which the classifier reads
    net = routable(model, [class_token], SHAPE).eval()
    x = varied_images(2)
    assert net.nodes["exit1"].transform.linear.in_features == 16
    torch.testing.assert_close(net(x).logits["exit2"], model(x))
    assert any(p is model.class_token for p in net.nodes["seg1"].parameters())
    with pytest.raises(RoutableError, match=f"exit '{class_token}' is not a .C, H, W. map, so it has no grid"):
        routable(model, [class_token], SHAPE, grid=2)


def test_grid_exits_on_a_torchvision_model_read_each_cell_s_average():
    model = torchvision.models.resnet18(num_classes=10).eval()
    net = routable(model, ["layer1", "layer3"], SHAPE, grid=2).eval()
    x = varied_images(2)
    torch.testing.assert_close(net(x).logits["exit3"], model(x))
    assert net.nodes["exit1"].transform.linear.in_features == 64 * 4 and net.macs["exit1"] == 64 * 4 * 10
    assert net.nodes["seg2"].router.layers[0].in_features == 256, "a router reads the mean of its head's cells"


def test_a_plain_resnet_checkpoint_loads_into_the_routed_resnet(tmp_path):
    torch.manual_seed(2)
    plain = resnet.build("resnet20", width=0.25)
    torch.save(plain.state_dict(), tmp_path / "plain.pt")
    routed = resnet.build("resnet20-exits", width=0.25)
    new = load_backbone(routed, torch.load(tmp_path / "plain.pt", weights_only=True))
    assert new and all(".router." in key or key.startswith(("nodes.exit1.", "nodes.exit2.")) for key in new)
    x = varied_images(3)
    torch.testing.assert_close(routed.eval()(x).logits["exit3"], plain.eval()(x).logits["exit3"])
    with pytest.raises(ValueError, match="another width or number of classes"):
        load_backbone(resnet.build("resnet20-exits", width=0.5), plain.state_dict())
    with pytest.raises(ValueError, match="holds 1 tensors this net has not"):
        load_backbone(routed, {**plain.state_dict(), "fc.weight": torch.zeros(1)})
