"""Small builders shared by the tests."""

from __future__ import annotations

import torch
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.router import Router


def randomize_routers(net: RoutedNet, x: torch.Tensor, seed: int = 0) -> RoutedNet:
    """Give every router's (zero-initialised) last layer random weights, and centre each
    sink's score over ``x``, so that argmax routing spreads ``x`` over many leaves."""
    generator = torch.Generator().manual_seed(seed)
    was_training = net.training
    net.eval()
    with torch.no_grad():
        for name in net.junctions:
            last = net.nodes[name].router.layers[-1]
            last.weight.copy_(torch.randn(last.weight.shape, generator=generator))
            last.bias.zero_()
        scores = net(x.to(next(net.parameters()).dtype)).scores
        for name in net.junctions:
            net.nodes[name].router.layers[-1].bias.copy_(-scores[name].mean(0))
    return net.train(was_training)


def varied_images(batch: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Images whose brightness and colour vary strongly between examples."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 3, 32, 32, generator=generator)
    x = x * torch.rand(batch, 1, 1, 1, generator=generator) * 4 + torch.randn(batch, 3, 1, 1, generator=generator)
    return x.to(dtype)


def vector_tree(k_cpt_input: bool = False, features: int = 6, classes: int = 3) -> RoutedNet:
    """A non-image routing tree on flat vectors: a 3-way root junction, one plain node,
    one 2-way junction; five leaves."""

    def mlp(n_in: int, n_out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())

    nodes = {
        "root": Node(mlp(features, 8), ["leafA", "mid", "fork"], Router(8, 3, k_cpt_input)),
        "leafA": Node(nn.Linear(8, classes)),
        "mid": Node(mlp(8, 4), ["leafB"]),
        "leafB": Node(nn.Linear(4, classes)),
        "fork": Node(mlp(8, 5), ["leafC", "leafD"], Router(5, 2, k_cpt_input)),
        "leafC": Node(nn.Linear(5, classes)),
        "leafD": Node(nn.Linear(5, classes)),
    }
    return RoutedNet(nodes, root="root", input_shape=(features,), classes=classes, k_cpt_input=k_cpt_input)
