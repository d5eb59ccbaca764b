import torch
from helpers import vector_tree

from routing_rl.core.execution import argmax_decide
from routing_rl.training.batchnorm import recalibrate


def first_norm(net, junction):
    return net.nodes[junction].router.layers[1]


def test_recalibration_averages_the_statistics_of_the_examples_routed_to_each_node():
    torch.manual_seed(0)
    net = vector_tree()
    x = torch.randn(64, 6)
    with torch.no_grad():
        net.nodes["root"].router.layers[-1].bias.copy_(torch.tensor([0.0, 0.0, 1.0]))  # everyone to fork
        fork_norm = first_norm(net, "fork")
        fork_norm.running_mean.fill_(3.0)
        features = net.nodes["root"].router.layers[0](net.nodes["root"].transform(x))
    momentum = first_norm(net, "root").momentum
    net.eval()
    recalibrate(net, x, argmax_decide, batch_size=64)
    assert not net.training, "the mode is restored"
    root_norm = first_norm(net, "root")
    torch.testing.assert_close(root_norm.running_mean, features.mean(0))
    torch.testing.assert_close(root_norm.running_var, features.var(0))
    assert root_norm.momentum == momentum
    assert not torch.allclose(fork_norm.running_mean, torch.full_like(fork_norm.running_mean, 3.0))
    # halves of the batch: the running statistics are the average of the two halves' statistics
    recalibrate(net, x, argmax_decide, batch_size=32)
    halves = features.view(2, 32, -1)
    torch.testing.assert_close(root_norm.running_mean, halves.mean(1).mean(0))


def test_a_node_no_example_reaches_keeps_its_statistics():
    net = vector_tree()
    with torch.no_grad():
        net.nodes["root"].router.layers[-1].bias.copy_(torch.tensor([1.0, 0.0, 0.0]))  # everyone exits at leafA
        first_norm(net, "fork").running_mean.fill_(3.0)
    recalibrate(net, torch.randn(16, 6))
    assert torch.equal(first_norm(net, "fork").running_mean, torch.full((16,), 3.0))
    assert int(first_norm(net, "fork").num_batches_tracked) == 0
