"""The optimisation core shared by every gradient learner and by the env's joint training
(paper Sections 4.4-4.5).

* :class:`SGDOptions` — the optimiser's settings; their defaults are
  :class:`~routing_rl.training.config.TrainConfig`'s, and :meth:`SGDOptions.from_config`
  copies them by name.
* :class:`RoutedSGD` — SGD with momentum on a routed net:

  - the learning rate halves continuously, ``lr · 0.5^(t / lr_half_life)``, ``t`` in optimiser steps,
    and over the first ``lr_warmup`` steps (0 by default, as in the paper) rises linearly to that
    schedule (:func:`lr_schedule`);
  - c_mod = k_L2 · Σ_nodes p̄_node · Σ_{w ∈ node} w²: L2 on the weights (not biases, not batch
    norm parameters) of each node's transform and router, weighted by ``p̄_node``, the
    stop-gradient mean over the batch of the probability that the training policy activates
    the node (1 where every example passes). So a rarely used layer is regularised as
    rarely as it is used, which is the paper's ``E[k_L2 Σ_{w ∈ W(d̂)} w²]``. Its gradient,
    ``2 k_L2 p̄_node w``, is added to the weights' gradients after ``backward()`` (two fused
    multi-tensor kernels) rather than back-propagated: through autograd it cost a square, a
    sum and an addition per weight tensor each way, a quarter of a static-8 step's
    operators, and a step on a GPU is bound by launching them;
  - TALR (:mod:`routing_rl.core.talr`) from the nodes' reach between ``backward()`` and the
    optimiser step;
  - data parallel (:meth:`RoutedSGD.distribute`): the loss scaled by this process's share of
    the global batch, gradients summed across processes before TALR, and TALR's mean ``p²``
    over the global batch;
  - ``state_dict``: the optimiser's (momentum).

Helpers every routing loss uses: :func:`training_policy`, :func:`leaf_errors`,
:func:`leaf_correct`, :func:`scalars`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from routing_rl.core.costs import error_cost
from routing_rl.core.graph import FullOutput, Node, RoutedNet
from routing_rl.core.policies import TrainingPolicy, halving
from routing_rl.core.talr import NodeGradients, talr_scales
from routing_rl.training.config import LR, TrainConfig
from routing_rl.training.distributed import Distributed

@dataclass(frozen=True)
class SGDOptions:
    """SGD's settings. lr: initial learning rate; lr_half_life: optimiser steps for it to
    halve; lr_warmup: optimiser steps of its linear rise (0: none); momentum; k_l2: weight of
    c_mod; talr: throughput-adjusted learning rates; probability_floor: the smallest routing
    probability (bounds TALR's factors)."""

    lr: float = LR
    lr_half_life: float = TrainConfig.lr_half_life
    lr_warmup: int = TrainConfig.lr_warmup
    momentum: float = TrainConfig.momentum
    k_l2: float = TrainConfig.k_l2
    talr: bool = TrainConfig.talr
    probability_floor: float = TrainConfig.probability_floor
    router_lr_scale: float = 1.0

    @classmethod
    def from_config(cls, config: TrainConfig, **overrides):
        """The options ``config`` sets (settings of the same name, the learner's defaults filled
        in: :meth:`~routing_rl.training.config.TrainConfig.resolved_values`), then ``overrides``."""
        settings = config.resolved_values()
        values = {f.name: settings[f.name] for f in dataclasses.fields(cls) if f.name in settings}
        return cls(**{**values, **overrides})


def lr_schedule(lr: float, step: float, half_life: float, warmup: int = 0) -> float:
    """``lr · 0.5^(step / half_life)``, times ``(step + 1) / warmup`` over the first ``warmup``
    steps. The ramp is for deep nets at a high rate on a short schedule: started at full rate,
    their first steps can leave them where the remaining, fast-halving steps cannot recover
    them (docs/results/optimistic-critic.md)."""
    ramp = min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    return halving(lr, step, half_life) * ramp


class RoutedSGD:
    """SGD with momentum over every parameter of ``net``, its schedule, c_mod and TALR.

    Args:
        net: the routed net whose parameters it steps.
        options: the settings.
        regularise_routers: whether router weights belong to c_mod (not where the routers
            never learn).
    """

    def __init__(self, net: RoutedNet, options: SGDOptions, regularise_routers: bool = True):
        self.options = options
        self.optimizer = torch.optim.SGD(_parameter_groups(net, options.router_lr_scale), lr=options.lr,
                                         momentum=options.momentum)
        self.gradients = NodeGradients(net)
        node_lists = [node_weights(net.nodes[name], regularise_routers) for name in net.order]
        self.weights = [w for weights in node_lists for w in weights]
        parameter = next(net.parameters())
        self.weight_node = torch.tensor([k for k, weights in enumerate(node_lists) for _ in weights],
                                        dtype=torch.long, device=parameter.device)
        self.dtype, self.device = parameter.dtype, parameter.device
        self.parameters = list(net.parameters())
        self.distributed: Distributed | None = None
        self.share = 1.0

    def distribute(self, distributed: Distributed, share: float) -> None:
        """Step as one of ``distributed.world_size`` processes whose loss covers ``share`` of
        the global batch (see :mod:`routing_rl.training.distributed`)."""
        self.distributed, self.share = distributed, share

    def lr(self, step: float) -> float:
        """The learning rate at optimiser step ``step``."""
        return lr_schedule(self.options.lr, step, self.options.lr_half_life, self.options.lr_warmup)

    def c_mod(self, usage: torch.Tensor | None = None) -> torch.Tensor:
        """``k_L2 · Σ_k usage[k] · Σ w²`` over nodes in ``net.order``; ``usage`` ``(N,)``, None
        meaning every node is always used. A value to log, without a graph: :meth:`step`
        adds its gradient for the same ``usage``."""
        with torch.no_grad():
            return self.c_mod_of_usage(None if usage is None else usage.detach())

    def c_mod_of_usage(self, usage: torch.Tensor | None) -> torch.Tensor:
        """:meth:`c_mod`, differentiable in ``usage`` ``(N,)`` only (the weights' part of its
        gradient is :meth:`step`'s): through ``usage``, c_mod reaches the routers."""
        if not self.weights:
            return torch.zeros((), dtype=self.dtype, device=self.device)
        with torch.no_grad():
            squares = torch.stack(torch._foreach_norm(self.weights)).square()
        if usage is not None:
            squares = squares * usage.to(squares.dtype)[self.weight_node]
        return self.options.k_l2 * squares.sum()

    def step(self, loss: torch.Tensor, step: int, reach: torch.Tensor | None = None,
             usage: torch.Tensor | None = None) -> float:
        """Back-propagate ``loss`` (c_mod's value in it is a constant); add c_mod's gradient
        for node usage ``usage`` ``(N,)`` (None: every node always used); with ``reach``
        ``(B, N)`` (nodes in ``net.order``) and ``options.talr``, scale each node's gradient
        by TALR; take one SGD step at the scheduled learning rate, which is returned."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.distributed is None:
            loss.backward()
        else:
            (loss * self.share).backward()
            self.distributed.reduce_gradients(self.parameters)
        self._add_c_mod_gradient(usage)
        if reach is not None and self.options.talr:
            mean = None if self.distributed is None else self.distributed.batch_mean
            self.gradients.scale(talr_scales(reach, self.options.probability_floor, mean))
        lr = self.lr(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_scale"]
        self.optimizer.step()
        return lr

    @torch.no_grad()
    def _add_c_mod_gradient(self, usage: torch.Tensor | None) -> None:
        """``grad += 2 k_L2 usage[node] w`` for every regularised weight ``w``; a weight
        without a gradient (not reached) gets this alone, so that momentum moves it as it
        would if c_mod were back-propagated."""
        if not self.weights:
            return
        for w in self.weights:
            if w.grad is None:
                w.grad = torch.zeros_like(w)
        grads = [w.grad for w in self.weights]
        scale = 2.0 * self.options.k_l2
        if usage is None:
            torch._foreach_add_(grads, self.weights, alpha=scale)
        else:
            coefficients = (scale * usage.detach().to(self.dtype)[self.weight_node]).tolist()
            torch._foreach_add_(grads, torch._foreach_mul(self.weights, coefficients))

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        scales = [group["lr_scale"] for group in self.optimizer.param_groups]
        self.optimizer.load_state_dict(state)
        for group, scale in zip(self.optimizer.param_groups, scales):  # this run's, also over older checkpoints'
            group["lr_scale"] = scale


def _parameter_groups(net: RoutedNet, router_lr_scale: float) -> list[dict]:
    """The optimiser's parameter groups: one, or the routers' apart when they step at another
    rate (one group keeps the optimiser state of runs saved before the scale existed)."""
    if router_lr_scale == 1.0:
        return [{"params": list(net.parameters()), "lr_scale": 1.0}]
    routers = {id(p) for node in net.nodes.values() if node.router is not None for p in node.router.parameters()}
    return [
        {"params": [p for p in net.parameters() if id(p) not in routers], "lr_scale": 1.0},
        {"params": [p for p in net.parameters() if id(p) in routers], "lr_scale": router_lr_scale},
    ]


def node_weights(node: Node, with_router: bool = True) -> list[torch.nn.Parameter]:
    """The weights c_mod regularises: kernels and matrices (two or more dimensions) of the
    node's transform and router, not biases or batch-norm scales."""
    modules = [node.transform] + ([node.router] if with_router and node.router is not None else [])
    return [p for module in modules for p in module.parameters() if p.ndim >= 2]


def training_policy(config: TrainConfig) -> TrainingPolicy:
    """The config's training routing policy with its schedule and floor."""
    options = config.options
    name = options.policy
    if name == "softmax":
        return TrainingPolicy(name, options.tau, options.tau_half_life, config.probability_floor)
    if name == "eps-greedy":
        return TrainingPolicy(name, options.epsilon, options.epsilon_half_life, config.probability_floor)
    return TrainingPolicy(name, 0.0, 1.0, config.probability_floor)


def leaf_errors(net: RoutedNet, output: FullOutput, labels: torch.Tensor, kind: str = "cross_entropy",
                error: Callable = error_cost) -> torch.Tensor:
    """``(B, L)`` c_err of every leaf's prediction, leaves in ``net.leaves`` order; ``error``
    computes it per example from ``(logits, labels, kind)`` (a task's ``error_cost``)."""
    logits = torch.stack([output.logits[leaf] for leaf in net.leaves], dim=1)
    b, n_leaves = logits.shape[:2]
    return error(logits.flatten(0, 1), labels.repeat_interleave(n_leaves), kind).view(b, n_leaves)


def leaf_correct(net: RoutedNet, output: FullOutput, labels: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` 1.0 where a leaf's prediction is right."""
    return torch.stack([(output.logits[leaf].argmax(1) == labels) for leaf in net.leaves], dim=1).float()


def scalars(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """Loggable floats from tensors and numbers, with one device synchronisation."""
    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    out = {k: float(v) for k, v in values.items() if not isinstance(v, torch.Tensor)}
    if tensors:
        flat = torch.stack([v.detach().float().reshape(()) for v in tensors.values()]).tolist()
        out.update(zip(tensors, flat))
    return out
