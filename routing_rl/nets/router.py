"""The paper's routing subnetwork: a small MLP from a node's descriptor to sink scores."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.core.k_cpt import K_CPT_UNIT, router_input
from routing_rl.nets.folding import Foldable, norm_affine, norm_tensors, use_folded

BN_EPS = 1e-6
BN_MOMENTUM = 0.1  # PyTorch's momentum is 1 - the paper's moving-average decay of 0.9
K_CPT_UNIT_BUFFER = "k_cpt_unit"
"""The state entry of a router that reads k_cpt: the unit of :func:`~routing_rl.core.k_cpt.router_input`."""


class RouterBatchNorm(nn.BatchNorm1d):
    """Batch norm that uses its running statistics for a lone training example.

    Routed training hands a junction whatever sub-batch reached it, sometimes one example,
    whose batch statistics do not exist.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training and x.shape[0] == 1:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        return super().forward(x)


class Router(Foldable):
    """Scores the sinks of one junction.

    descriptor ``(B, in_features)`` [+ :func:`~routing_rl.core.k_cpt.router_input` of k_cpt]
    → linear 16 → BN → ReLU → linear 16 → BN → ReLU → linear ``n_sinks``. The last layer
    starts at zero, so every junction starts indifferent between its sinks. A router that
    reads k_cpt keeps the unit it reads it in (buffer ``k_cpt_unit``) in its state, so a
    checkpoint says how its routers read k_cpt, and one written before they read it on a log
    scale has no such tensor and is refused.

    Args:
        in_features: size of the node's descriptor.
        n_sinks: number of sinks (≥ 2).
        k_cpt_input: append k_cpt (cost per MAC; a float or a ``(B,)`` tensor) to the input.
        hidden: width of the two hidden layers.
    """

    def __init__(self, in_features: int, n_sinks: int, k_cpt_input: bool = False, hidden: int = 16):
        super().__init__()
        if n_sinks < 2:
            raise ValueError(f"a router needs at least 2 sinks, got {n_sinks}")
        self.k_cpt_input = k_cpt_input
        self.layers = nn.Sequential(
            nn.Linear(in_features + int(k_cpt_input), hidden),
            RouterBatchNorm(hidden, eps=BN_EPS, momentum=BN_MOMENTUM),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            RouterBatchNorm(hidden, eps=BN_EPS, momentum=BN_MOMENTUM),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, n_sinks),
        )
        if k_cpt_input:
            self.register_buffer(K_CPT_UNIT_BUFFER, torch.tensor(K_CPT_UNIT, dtype=torch.float64))  # float32 rounds it
        for layer in self.layers:
            if isinstance(layer, nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)
        nn.init.zeros_(self.layers[-1].weight)

    @torch.no_grad()
    def start_at(self, score: float) -> None:
        """Every sink's score starts at ``score`` (the last layer's weight is zero until it learns)."""
        self.layers[-1].bias.fill_(score)

    @property
    def n_sinks(self) -> int:
        return self.layers[-1].out_features

    def forward(self, descriptor: torch.Tensor, k_cpt: float | torch.Tensor | None = None) -> torch.Tensor:
        """Scores ``(B, n_sinks)``; ``k_cpt`` is required iff the router reads it, else ignored."""
        if self.k_cpt_input:
            if k_cpt is None:
                raise ValueError("this router reads k_cpt (built with k_cpt_input=True); pass k_cpt=")
            k_cpt = torch.as_tensor(k_cpt, dtype=descriptor.dtype, device=descriptor.device)
            column = router_input(k_cpt, self.k_cpt_unit).to(descriptor.dtype).expand(descriptor.shape[0]).unsqueeze(1)
            descriptor = torch.cat([descriptor, column], dim=1)
        if not use_folded(self, self.layers):
            return self.layers(descriptor)
        first_t, first_bias, second_t, second_bias, last_t, last_bias = self._folded()
        x = torch.addmm(first_bias, descriptor, first_t).relu_()
        x = torch.addmm(second_bias, x, second_t).relu_()
        return torch.addmm(last_bias, x, last_t)

    def _fold_sources(self) -> list[torch.Tensor]:
        layers = self.layers._modules
        sources = []
        for linear, norm in (("0", "1"), ("3", "4")):
            sources += [layers[linear]._parameters["weight"], layers[linear]._parameters["bias"], *norm_tensors(layers[norm])]
        return sources + [layers["6"]._parameters["weight"], layers["6"]._parameters["bias"]]

    def _fold(self) -> tuple[torch.Tensor, ...]:
        """Transposed weights and biases of the three linear layers, with batch norm folded
        into the first two. Routers run at every junction an example passes, and at small
        batches the calls, not the arithmetic, are their cost (batch norm's most of all)."""
        first, norm1, _, second, norm2, _, last = self.layers
        folded = []
        for linear, norm in ((first, norm1), (second, norm2)):
            scale, shift = norm_affine(norm)
            folded += [(linear.weight * scale.unsqueeze(1)).t().contiguous(), linear.bias * scale + shift]
        return (*folded, last.weight.t().contiguous(), last.bias.clone())


def read_exit_confidence(net: RoutedNet) -> RoutedNet:
    """The same net (modules and weights shared) whose routers also read the confidence of
    the heads among their sinks (:func:`~routing_rl.core.graph.exit_confidence`, the signal a
    confidence threshold routes on), and whose env observations carry it.

    Each :class:`Router`'s first layer gets one input more per such head, after the
    descriptor (before k_cpt, for a router that reads it), its weights zero: the routers start
    where they were and learn how far to trust each head. The routers are widened in place,
    so use the returned net, not ``net``. Raises ValueError if a junction's router is not a
    :class:`Router`.
    """
    if net.exit_confidence:
        return net
    for name in net.junctions:
        router = net.nodes[name].router
        if not isinstance(router, Router):
            raise ValueError(f"junction {name!r} has a {type(router).__name__}, not a Router, so it cannot read "
                             "its exits' confidence; build its routers with routing_rl.nets.router.Router")
        exits = sum(net.nodes[sink].is_leaf for sink in net.nodes[name].sinks)
        first = router.layers[0]
        descriptor_size = first.in_features - int(router.k_cpt_input)
        wider = nn.Linear(first.in_features + exits, first.out_features, device=first.weight.device)
        with torch.no_grad():
            wider.weight.zero_()
            wider.weight[:, :descriptor_size] = first.weight[:, :descriptor_size]
            wider.weight[:, wider.in_features - int(router.k_cpt_input):] = first.weight[:, descriptor_size:]
            wider.bias.copy_(first.bias)
        router.layers[0] = wider
        router._fold_cache = None
    nodes: dict[str, Node] = dict(net.nodes.items())
    return RoutedNet(nodes, net.root, net.input_shape, net.classes, net.k_cpt_input, exit_confidence=True)
