"""SB3 callbacks that log routing quantities with the project's tags (see
:mod:`routing_rl.training.monitor`), through SB3's own logger (so into its TensorBoard files).

* :class:`TrainingCharts` — from the infos of recently finished training episodes:
  ``charts/train_accuracy``, ``charts/train_mean_macs``, ``charts/train_c_err``; from the
  environment's feature trainer: ``losses/c_err``, ``losses/c_mod``, ``charts/lr``; for DQN,
  ``charts/epsilon``.
* :class:`Validation` — run by SB3's ``EvalCallback`` after each of its evaluations: the
  shared evaluator (:func:`routing_rl.training.evaluate.evaluate`) on the validation split, routing by
  the agent, at every k_cpt the run is judged at. Logs ``charts/val_accuracy``,
  ``charts/val_mean_macs`` and ``routing/val_fraction/<leaf>`` and keeps a history.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
from routing_rl.envs.joint import FeatureTrainer
from stable_baselines3.common.callbacks import BaseCallback

from routing_rl.training.checkpoint import atomic_write_text
from routing_rl.data import Split
from routing_rl.training.evaluate import evaluate
from routing_rl.core.execution import Decide
from routing_rl.core.graph import RoutedNet
from routing_rl.training.monitor import evaluation_scalars


class TrainingCharts(BaseCallback):
    """Routing statistics of the last ``window`` finished training episodes."""

    def __init__(self, trainer: FeatureTrainer, window: int = 1000):
        super().__init__()
        self.trainer = trainer
        self.episodes: deque[tuple[int, bool, float]] = deque(maxlen=window)

    def _on_step(self) -> bool:
        infos, dones = self.locals["infos"], self.locals["dones"]
        for i in np.flatnonzero(dones):
            info = infos[i]
            self.episodes.append((info["macs"], info["correct"], info["c_err"]))
        return True

    def _on_rollout_end(self) -> None:
        if self.episodes:
            macs, correct, c_err = np.array(self.episodes, dtype=np.float64).T
            self.logger.record("charts/train_accuracy", correct.mean())
            self.logger.record("charts/train_mean_macs", macs.mean())
            self.logger.record("charts/train_c_err", c_err.mean())
        for tag, value in self.trainer.last.items():
            self.logger.record(tag, value)
        if hasattr(self.model, "exploration_rate"):
            self.logger.record("charts/epsilon", self.model.exploration_rate)


class Validation(BaseCallback):
    """The shared evaluator on ``validation`` at each k in ``k_cpts``; history saved to ``path``.

    Args:
        decide: k_cpt -> the agent's routing ``decide`` at that cost.
        history: entries ``{"iteration", "evaluations"}`` of an earlier part of the run.
        task: the routing task, whose memory episodes of frames carry.
    """

    def __init__(self, net: RoutedNet, validation: Split, k_cpts: list[float], decide: Callable[[float], Decide],
                 path: Path, history: list[dict] | None = None, task=None):
        super().__init__()
        self.net, self.validation, self.k_cpts, self.decide, self.task = net, validation, k_cpts, decide, task
        self.path = Path(path)
        self.history = list(history or [])

    def _on_step(self) -> bool:
        entry = {"iteration": self.num_timesteps, "evaluations": []}
        for k_cpt in self.k_cpts:
            result = evaluate(self.net, self.validation, k_cpt, self.decide(k_cpt), task=self.task)
            entry["evaluations"].append(result)
            suffix = "" if len(self.k_cpts) == 1 else f"_k{k_cpt:g}"
            for tag, value in evaluation_scalars(result, "val" + suffix).items():
                self.logger.record(tag, value)
        self.logger.dump(self.num_timesteps)  # EvalCallback has dumped already; tie these to this step
        self.history.append(entry)
        atomic_write_text(self.path, json.dumps(self.history))
        return True
