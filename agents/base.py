"""The small protocol every gradient-trained learner shares, and its registry.

A :class:`Learner` owns a :class:`~routing_rl.core.graph.RoutedNet` and its optimiser. The
trainer (:mod:`routing_rl.app.trainer`) feeds it augmented batches, one per iteration; the
shared evaluator judges it through :meth:`Learner.decide` (argmax of the routers unless a
learner routes otherwise, as the threshold baseline does). SB3 baselines do not fit this
loop — SB3's ``learn()`` drives them — and live in :mod:`routing_rl.agents.sb3`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from routing_rl.training.config import TrainConfig
from routing_rl.core.costs import K_CPT_VALUES
from routing_rl.data import Split
from routing_rl.core.execution import Decide, argmax_decide
from routing_rl.core.graph import RoutedNet


class Learner(ABC):
    """Trains one routed net.

    Args:
        net: the net to train, already on ``device``.
        config: the run's configuration (hyperparameters, schedules, k_cpt).
        device: where batches will arrive.
    """

    def __init__(self, net: RoutedNet, config: TrainConfig, device: torch.device):
        self.net = net
        self.config = config
        self.device = device

    @abstractmethod
    def train_step(self, batch: Split, iteration: int) -> dict[str, float]:
        """One optimisation step on an augmented batch (on ``device``).

        Returns scalars to log, keyed by their TensorBoard tag: ``losses/c_err``,
        ``losses/c_cpt``, ``losses/c_mod``, ``losses/c_dec``, ``losses/c_ure``,
        ``losses/total``, ``charts/lr``, ``charts/tau`` or ``charts/epsilon``, and
        ``charts/train_accuracy``, ``charts/train_mean_macs`` where they exist.
        """

    def before_evaluation(self, train: Split) -> None:
        """Called before every validation and before the final test evaluation, with the
        training split (un-augmented): a learner whose evaluation-mode net needs refreshing
        from training data (batch-norm statistics) does it here."""

    def decide(self, k_cpt: float | None) -> Decide:
        """The inference routing policy to evaluate with."""
        return argmax_decide

    def eval_k_cpts(self) -> list[float]:
        """The k_cpt values to evaluate at: every paper value for a dynamic-k_cpt net."""
        return list(K_CPT_VALUES) if self.config.dynamic_k_cpt else [float(self.config.k_cpt)]

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
