"""What every gradient-trained learner shares (paper Sections 4.4-4.7).

* SGD with momentum; the learning rate halves continuously, ``lr · 0.5^(t / lr_half_life)``.
* c_mod = k_L2 · Σ_nodes p̄_node · Σ_{w ∈ node} w²: L2 on the weights (not biases, not batch
  norm parameters) of each node's transform and router, weighted by ``p̄_node``, the
  stop-gradient mean over the batch of the probability that the training policy activates
  the node (1 where every example passes). So a rarely used layer is regularised as
  rarely as it is used, which is the paper's ``E[k_L2 Σ_{w ∈ W(d̂)} w²]``.
* Per-example k_cpt: the configured one, or for a dynamic-k_cpt net one drawn per training
  example from :data:`~routing_rl.core.costs.K_CPT_VALUES` (Section 4.6).
* TALR (:mod:`routing_rl.core.talr`) between ``backward()`` and the optimiser step.
* Data parallel (:meth:`SGDLearner.distribute`): each process's loss is scaled by its share of
  the global batch and the gradients summed across processes before TALR; batch means
  (:meth:`SGDLearner.batch_mean`) are over the global batch.
* ``state_dict``: the net, the optimiser (momentum) and the learner's random generator.
"""

from __future__ import annotations

import torch

from routing_rl.agents.base import Learner
from routing_rl.training.config import TrainConfig
from routing_rl.core.costs import K_CPT_VALUES, error_cost
from routing_rl.core.graph import FullOutput, Node, RoutedNet
from routing_rl.core.policies import TrainingPolicy, halving
from routing_rl.core.talr import NodeGradients, talr_scales
from routing_rl.training.distributed import Distributed, synchronise_batch_norm


class SGDLearner(Learner):
    """Base of the static, actor, critic and threshold learners.

    Args:
        net, config, device: as :class:`~routing_rl.agents.base.Learner`.
        regularise_routers: whether router weights belong to c_mod (not for learners that
            never use the routers).
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, regularise_routers: bool = True):
        super().__init__(net, config, device)
        self.optimizer = torch.optim.SGD(net.parameters(), lr=config.lr, momentum=config.momentum)
        # seed + 2: the trainer's batch sampler and augmentation use seed and seed + 1
        self.generator = torch.Generator(device=device).manual_seed(config.seed + 2)
        self.gradients = NodeGradients(net)
        self.weights = [node_weights(net.nodes[name], regularise_routers) for name in net.order]
        self.dtype = next(net.parameters()).dtype
        self.leaf_macs = net.leaf_macs.to(self.dtype)
        self.k_cpt_values = torch.tensor(K_CPT_VALUES, dtype=self.dtype, device=device)
        self.distributed: Distributed | None = None

    def distribute(self, distributed: Distributed) -> None:
        """Train as one of ``distributed.world_size`` processes, each on its shard of every
        global batch of ``config.batch_size``: batch norm over the global batch, gradients and
        batch means summed across processes (see :mod:`routing_rl.training.distributed`)."""
        self.distributed = distributed
        self.shard = distributed.shard(self.config.batch_size)
        self.share = distributed.share(self.config.batch_size)
        synchronise_batch_norm(self.net)

    def batch_mean(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` ``(b, ...)`` averaged over the batch; across processes, over the global
        batch (the sum of every shard's sums over the global batch size), never a mean of means."""
        if self.distributed is None:
            return values.mean(0)
        return self.distributed.sum(values.sum(0)) / self.config.batch_size

    def lr(self, iteration: float) -> float:
        return halving(self.config.lr, iteration, self.config.lr_half_life)

    def sample_k_cpt(self, batch_size: int) -> torch.Tensor:
        """``(B,)`` cost per MAC of each training example."""
        if self.config.dynamic_k_cpt:
            if self.distributed is None:
                pick = torch.randint(len(K_CPT_VALUES), (batch_size,), generator=self.generator, device=self.device)
            else:  # every process draws the global batch's costs and keeps its shard's
                pick = torch.randint(len(K_CPT_VALUES), (self.config.batch_size,), generator=self.generator,
                                     device=self.device)[self.shard]
            return self.k_cpt_values[pick]
        return torch.full((batch_size,), float(self.config.k_cpt), dtype=self.dtype, device=self.device)

    def c_mod(self, usage: torch.Tensor | None = None) -> torch.Tensor:
        """``k_L2 · Σ_k usage[k] · Σ w²`` over nodes in ``net.order``; ``usage`` ``(N,)``
        (stop-gradient), None meaning every node is always used."""
        zero = torch.zeros((), dtype=self.dtype, device=self.device)
        squares = torch.stack([sum((w.square().sum() for w in weights), zero) for weights in self.weights])
        if usage is not None:
            squares = squares * usage.detach().to(squares.dtype)
        return self.config.k_l2 * squares.sum()

    def step(self, loss: torch.Tensor, iteration: int, talr_scales: torch.Tensor | None = None) -> float:
        """Back-propagate ``loss``, apply TALR (per-node factors in ``net.order``) if given,
        and take one SGD step at the scheduled learning rate, which is returned."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.distributed is None:
            loss.backward()
        else:
            (loss * self.share).backward()
            self.distributed.reduce_gradients(list(self.net.parameters()))
        if talr_scales is not None:
            self.gradients.scale(talr_scales)
        lr = self.lr(iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        return lr

    def routed_step(self, terms: dict[str, torch.Tensor], names: tuple[str, ...], iteration: int) -> dict[str, float]:
        """One step of a routing learner: the sum of the loss terms ``names``, TALR from
        ``terms["reach"]`` ``(B, N)``, and the scalars to log. ``terms`` also carries the
        training-policy ``accuracy`` and ``mean_macs``; ``self.policy`` is the training policy."""
        total = sum(terms[name] for name in names)
        scales = talr_scales(terms["reach"], self.policy.floor, self.batch_mean) if self.config.talr else None
        lr = self.step(total, iteration, scales)
        return scalars({
            **{f"losses/{name}": terms[name] for name in names},
            "losses/total": total,
            "charts/lr": lr,
            **self.policy.charts(iteration),
            "charts/train_accuracy": terms["accuracy"],
            "charts/train_mean_macs": terms["mean_macs"],
        })

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"].cpu())


def node_weights(node: Node, with_router: bool = True) -> list[torch.nn.Parameter]:
    """The weights c_mod regularises: kernels and matrices (two or more dimensions) of the
    node's transform and router, not biases or batch-norm scales."""
    modules = [node.transform] + ([node.router] if with_router and node.router is not None else [])
    return [p for module in modules for p in module.parameters() if p.ndim >= 2]


def training_policy(config: TrainConfig) -> TrainingPolicy:
    """The config's training routing policy with its schedule and floor."""
    name = config.resolved_policy
    if name == "softmax":
        return TrainingPolicy(name, config.resolved_tau, config.tau_half_life, config.probability_floor)
    if name == "eps-greedy":
        return TrainingPolicy(name, config.epsilon, config.epsilon_half_life, config.probability_floor)
    return TrainingPolicy(name, 0.0, 1.0, config.probability_floor)


def leaf_errors(net: RoutedNet, output: FullOutput, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
    """``(B, L)`` c_err of every leaf's prediction, leaves in ``net.leaves`` order."""
    logits = torch.stack([output.logits[leaf] for leaf in net.leaves], dim=1)
    b, n_leaves = logits.shape[:2]
    return error_cost(logits.flatten(0, 1), labels.repeat_interleave(n_leaves), kind).view(b, n_leaves)


def leaf_correct(net: RoutedNet, output: FullOutput, labels: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` 1.0 where a leaf's prediction is right."""
    return torch.stack([(output.logits[leaf].argmax(1) == labels) for leaf in net.leaves], dim=1).float()


def check_error_cost(config: TrainConfig) -> None:
    if config.error_cost != "cross_entropy":
        raise ValueError(
            f"error_cost {config.error_cost!r} has no gradient for the heads to learn from; keep "
            "cross_entropy (a critic can use --utility-error zero_one inside its utility)"
        )


def scalars(values: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """Loggable floats from tensors and numbers, with one device synchronisation."""
    tensors = {k: v for k, v in values.items() if isinstance(v, torch.Tensor)}
    out = {k: float(v) for k, v in values.items() if not isinstance(v, torch.Tensor)}
    if tensors:
        flat = torch.stack([v.detach().float().reshape(()) for v in tensors.values()]).tolist()
        out.update(zip(tensors, flat))
    return out

