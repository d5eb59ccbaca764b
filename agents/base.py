"""The small protocol every gradient-trained learner shares, and the SGD learner base.

A :class:`Learner` owns a :class:`~routing_rl.core.graph.RoutedNet` and its optimiser. The
trainer (:mod:`routing_rl.app.trainer`) feeds it augmented batches, one per iteration; the
shared evaluator judges it through :meth:`Learner.decide` (argmax of the routers unless a
learner routes otherwise, as the threshold baseline does). SB3 baselines do not fit this
loop — SB3's ``learn()`` drives them — and live in :mod:`routing_rl.agents.sb3`.

:class:`SGDLearner` is the base of the static, actor, critic and threshold learners: the
shared optimisation core (:class:`~routing_rl.training.sgd.RoutedSGD`: halving learning rate,
c_mod, TALR), per-example k_cpt (:class:`~routing_rl.core.k_cpt.KCpt`: the configured one, or
for a dynamic-k_cpt net one drawn per training example, Section 4.6), each leaf path's cost
(:class:`~routing_rl.core.k_cpt.CostModel`: MACs or measured MAC-equivalents), one routed
training step, and ``state_dict`` (net, optimiser momentum, the learner's random generator).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from routing_rl.training.config import TrainConfig
from routing_rl.data import Split
from routing_rl.core.costs import error_cost
from routing_rl.core.execution import Decide, argmax_decide
from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel, KCpt
from routing_rl.core.seeds import seeded_generator
from routing_rl.training.distributed import Distributed, synchronise_batch_norm
from routing_rl.training.learners import LearnerOptions
from routing_rl.training.sgd import RoutedSGD, SGDOptions, scalars


@dataclass
class RouterOptions(LearnerOptions):
    """The options of a learner that trains its routers itself under a softmax training policy
    (the actor, the critics): its temperature τ, halving every ``tau_half_life`` iterations;
    the routers' learning rate as a multiple of ``lr``; and c_heads' weight, every head's
    cross-entropy on every image beside c_err."""

    tau: float | None = 0.1
    tau_half_life: int = 500
    router_lr_scale: float | None = 1.0
    head_weight: float | None = 0.0


class Learner(ABC):
    """Trains one routed net.

    Args:
        net: the net to train, already on ``device``.
        config: the run's configuration (hyperparameters, schedules, k_cpt).
        device: where batches will arrive.
        cost: what each node's computation costs (c_cpt = k_cpt × cost); None: its MACs.

    Attributes:
        task: the routing task the splits come from (set by
            :func:`~routing_rl.agents.registry.make_learner`; None: splits of single inputs).
            A learner that routes a split one input at a time outside training plays a split
            of sequences through its memory first
            (:func:`~routing_rl.training.episodes.frame_examples`).
    """

    task = None

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None):
        self.net = net
        self.config = config
        self.device = device
        self.k_cpt = KCpt(config.k_cpt)
        self.cost = cost if cost is not None else CostModel.macs(net)

    @abstractmethod
    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        """One optimisation step on an augmented batch (on ``device``).

        Returns scalars to log, keyed by their TensorBoard tag: ``losses/c_err``,
        ``losses/c_cpt``, ``losses/c_mod``, ``losses/c_dec``, ``losses/c_ure``,
        ``losses/total``, ``charts/lr``, ``charts/tau`` or ``charts/epsilon``, and
        ``charts/train_accuracy``, ``charts/train_mean_macs`` where they exist.
        """

    def before_evaluation(self, train: Split, iteration: int) -> None:
        """Called before every validation and before the final test evaluation, with the
        training split (un-augmented; clips for a sequence task) and the iterations trained so
        far: a learner whose evaluation-mode net needs refreshing from training data
        (batch-norm statistics) does it here."""

    def error_cost(self, logits: torch.Tensor, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
        """c_err per example ``(B,)``: :attr:`task`'s (a plug-in may define its own), else
        :func:`routing_rl.core.costs.error_cost`. Every loss a learner trains on reads it here."""
        return (error_cost if self.task is None else self.task.error_cost)(logits, labels, kind)

    def decide(self, k_cpt: float | None) -> Decide:
        """The inference routing policy to evaluate with."""
        return argmax_decide

    def eval_k_cpts(self) -> list[float]:
        """The k_cpt values to evaluate at: every paper value for a dynamic-k_cpt net."""
        return list(self.k_cpt.values)

    def evaluation_points(self, validation: Split) -> list[tuple[dict, float, Decide]]:
        """The settings a trained learner is judged at on the test split:
        ``(fields to record beside the result, k_cpt, decide)``, one per point of its curve.
        Anything tuned for a point (the threshold baseline's thresholds) is tuned on
        ``validation``, never on the test split."""
        return [({}, k_cpt, self.decide(k_cpt)) for k_cpt in self.eval_k_cpts()]

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything needed to resume: net, optimiser, and any learner state."""

    @abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""


class SGDLearner(Learner):
    """Base of the static, actor, critic and threshold learners.

    Args:
        net: as :class:`Learner`.
        config: as :class:`Learner`.
        device: as :class:`Learner`.
        cost: as :class:`Learner`.
        regularise_routers: whether router weights belong to c_mod (not for learners that
            never use the routers).
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device, cost: CostModel | None = None,
                 regularise_routers: bool = True):
        super().__init__(net, config, device, cost)
        self.sgd = RoutedSGD(net, SGDOptions.from_config(config), regularise_routers)
        # seed + 2: the trainer's batch sampler and augmentation use seed and seed + 1
        self.generator = seeded_generator(config.seed + 2, device)
        self.dtype = self.sgd.dtype
        self.leaf_macs = net.leaf_macs.to(self.dtype)
        self.leaf_cost = self.cost.leaf_cost(self.leaf_macs)
        self.distributed: Distributed | None = None

    def distribute(self, distributed: Distributed) -> None:
        """Train as one of ``distributed.world_size`` processes, each on its shard of every
        global batch of ``config.batch_size``: batch norm over the global batch, gradients and
        batch means summed across processes (see :mod:`routing_rl.training.distributed`)."""
        self.distributed = distributed
        self.shard = distributed.shard(self.config.batch_size)
        self.sgd.distribute(distributed, distributed.share(self.config.batch_size))
        synchronise_batch_norm(self.net)

    def batch_mean(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` ``(b, ...)`` averaged over the batch; across processes, over the global batch."""
        return values.mean(0) if self.distributed is None else self.distributed.batch_mean(values)

    def sample_k_cpt(self, batch_size: int) -> torch.Tensor:
        """``(B,)`` k_cpt of each training example (across processes: the draws of the global
        batch, this process's shard of them)."""
        if self.distributed is None:
            return self.k_cpt.sample(batch_size, self.generator, self.dtype, self.device)
        return self.k_cpt.sample(self.config.batch_size, self.generator, self.dtype, self.device)[self.shard]

    def c_mod(self, usage: torch.Tensor | None = None) -> torch.Tensor:
        """c_mod of the net; see :meth:`RoutedSGD.c_mod`."""
        return self.sgd.c_mod(usage)

    def step(self, loss: torch.Tensor, iteration: int, reach: torch.Tensor | None = None,
             usage: torch.Tensor | None = None) -> float:
        """One optimiser step on ``loss`` with c_mod's gradient for node usage ``usage`` (None:
        every node always used) and TALR from ``reach`` when given; returns the lr."""
        return self.sgd.step(loss, iteration, reach, usage)

    def routed_step(self, terms: dict[str, torch.Tensor], names: tuple[str, ...], iteration: int) -> dict[str, float]:
        """One step of a routing learner: the sum of the loss terms ``names``, c_mod's gradient
        for ``terms["usage"]`` ``(N,)``, TALR from ``terms["trained"]`` ``(B, N)`` (how much each
        node learns from each example; where absent, ``terms["reach"]``), and the
        scalars to log. ``terms`` also carries the training-policy ``accuracy`` and
        ``mean_macs``; ``self.policy`` is the training policy."""
        total = sum(terms[name] for name in names)
        lr = self.step(total, iteration, terms.get("trained", terms["reach"]), terms["usage"])
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
            "optimizer": self.sgd.state_dict(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.sgd.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"].cpu())
