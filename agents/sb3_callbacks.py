"""SB3 callbacks that log routing quantities with the project's tags (see
:mod:`routing_rl.training.monitor`), through SB3's own logger (so into its TensorBoard files).

* :class:`TrainingCharts` — from the infos of recently finished training episodes:
  ``charts/train_accuracy``, ``charts/train_mean_macs``, ``charts/train_c_err``; from the
  environment's feature trainer: ``losses/c_err``, ``losses/c_mod``, ``charts/lr``; for DQN,
  ``charts/epsilon``.
* :class:`Validation` — run by SB3's ``EvalCallback`` after each of its evaluations: the
  shared evaluator (:func:`routing_rl.training.evaluate.evaluate`) on the validation split, routing by
  the agent, at every k_cpt the run is judged at. Logs ``charts/val_accuracy``,
  ``charts/val_mean_macs``, ``routing/val_fraction/<leaf>`` and the figures it is given
  (``figures/node_link``) and keeps a history; :func:`~routing_rl.agents.sb3.train_sb3` runs it
  once more at the end when the last evaluation came before the last iteration.
* :class:`EveryIterations` — runs its child callback each time the feature trainer completes
  another ``every`` iterations (optimiser steps of ``batch_size`` finished episodes, i.e.
  images), the clock every learner's schedule runs on.
* :class:`IterationCheckpoint` — SB3's ``CheckpointCallback`` naming each zip by iteration,
  ``{prefix}_{iteration}_iterations.zip``.
* :class:`ImageBudget` — ends ``learn()`` once the feature trainer has taken ``iterations`` steps.
* :class:`StopBetweenSteps` — raises :class:`~routing_rl.training.interrupt.Interrupted` at
  the start of a rollout once Ctrl-C or SIGTERM asked for a stop: a clean point to save.
* :class:`ProgressCallback` — the run's :class:`~routing_rl.training.monitor.Progress` (a bar
  on a terminal, periodic lines elsewhere), stepped by the feature trainer's iterations.
* :class:`IterationLogger` — SB3's logger, writing every record at the iteration, so that
  TensorBoard's step axis is the same for SB3 agents and the paper's learners.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
from routing_rl.envs.joint import FeatureTrainer
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EventCallback
from stable_baselines3.common.logger import Figure, Logger, TensorBoardOutputFormat, make_output_format
from torch.utils.tensorboard import SummaryWriter

from routing_rl.core.files import atomic_write_text
from routing_rl.data import Split
from routing_rl.training.evaluate import evaluate
from routing_rl.training.interrupt import Interrupted, stop_requested
from routing_rl.core.execution import Decide
from routing_rl.core.graph import RoutedNet
from routing_rl.training.monitor import Progress, evaluation_scalars


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
        clock: the current training iteration.
        history: entries ``{"iteration", "evaluations"}`` of an earlier part of the run.
        task: the routing task, whose memory episodes of frames carry, and whose class and
            source names the results use.
        progress: told the accuracy of each validation (at the first k_cpt).
        figures: entry -> ``{tag: matplotlib figure}`` logged beside the scalars (the
            application's ``figures/node_link``); None: none.
    """

    def __init__(self, net: RoutedNet, validation: Split, k_cpts: list[float], decide: Callable[[float], Decide],
                 path: Path, clock: Callable[[], int], history: list[dict] | None = None, task=None,
                 progress: Progress | None = None, figures: Callable[[dict], dict] | None = None):
        super().__init__()
        self.net, self.validation, self.k_cpts, self.decide, self.task = net, validation, k_cpts, decide, task
        self.progress = progress
        self.clock, self.figures = clock, figures
        self.path = Path(path)
        self.history = list(history or [])

    def _on_step(self) -> bool:
        entry = {"iteration": self.clock(), "evaluations": []}
        names = {"classes": self.task.classes, "sources": self.task.sources} if self.task is not None else {}
        for k_cpt in self.k_cpts:
            result = evaluate(self.net, self.validation, k_cpt, self.decide(k_cpt), task=self.task, **names)
            entry["evaluations"].append(result)
            suffix = "" if len(self.k_cpts) == 1 else f"_k{k_cpt:g}"
            for tag, value in evaluation_scalars(result, "val" + suffix).items():
                self.logger.record(tag, value)
        for tag, figure in (self.figures(entry) if self.figures is not None else {}).items():
            self.logger.record(tag, Figure(figure, close=True), exclude=("stdout", "log", "json", "csv"))
        self.logger.dump()  # EvalCallback has dumped already; tie these to this iteration
        self.history.append(entry)
        atomic_write_text(self.path, json.dumps(self.history))
        if self.progress is not None:
            self.progress.validated(entry["evaluations"][0]["accuracy"], entry["iteration"])
        return True


class EveryIterations(EventCallback):
    """Runs ``callback`` whenever ``trainer.updates`` passes another multiple of ``every``."""

    def __init__(self, trainer: FeatureTrainer, every: int, callback: BaseCallback):
        super().__init__(callback)
        self.trainer, self.every = trainer, every
        self.mark = 0

    def _init_callback(self) -> None:
        super()._init_callback()
        self.mark = self.trainer.updates // self.every

    def _on_step(self) -> bool:
        mark = self.trainer.updates // self.every
        if mark > self.mark:
            self.mark = mark
            return self._on_event()
        return True


class ImageBudget(BaseCallback):
    """Stops ``learn()`` once ``trainer.updates`` reaches ``iterations``."""

    def __init__(self, trainer: FeatureTrainer, iterations: int):
        super().__init__()
        self.trainer, self.iterations = trainer, iterations

    def _on_step(self) -> bool:
        return self.trainer.updates < self.iterations


class StopBetweenSteps(BaseCallback):
    """Raises :class:`~routing_rl.training.interrupt.Interrupted` when a rollout starts after a
    signal asked for a stop: SB3 has finished the previous training and not begun the next
    environment step, so nothing is half done (``on_step`` comes between an environment step
    and the storing of its transition). For DQN a rollout is one vector step, for PPO and A2C
    ``n_steps`` of them."""

    def __init__(self, trainer: FeatureTrainer):
        super().__init__()
        self.trainer = trainer

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        if stop_requested():
            raise Interrupted(stop_requested(), self.trainer.updates)


class ProgressCallback(BaseCallback):
    """Steps ``progress`` by ``trainer.updates``: each iteration is ``batch_size`` images, and
    the loss shown is the feature network's latest (c_err + c_mod)."""

    def __init__(self, trainer: FeatureTrainer, progress: Progress):
        super().__init__()
        self.trainer, self.progress = trainer, progress

    def _on_step(self) -> bool:
        steps = self.trainer.updates - self.progress.iteration
        if steps > 0:
            loss = sum(v for k, v in self.trainer.last.items() if k.startswith("losses/"))
            self.progress.update(steps, steps * self.trainer.options.batch_size, loss)
        return True


class ResumedTensorBoard(TensorBoardOutputFormat):
    """SB3's TensorBoard output with TensorBoard's ``purge_step``: the events from it on that
    an interrupted process wrote past its last checkpoint are dropped, so no step shows twice."""

    def __init__(self, folder: str, purge_step: int):
        self.writer = SummaryWriter(log_dir=folder, purge_step=purge_step)
        self._is_closed = False


class IterationLogger(Logger):
    """SB3's logger into ``folder`` (``formats`` as for ``configure``) whose every dump is
    stepped by ``clock()``, whatever step SB3 passes; a resumed run passes ``purge_step``,
    the first step after its checkpoint."""

    def __init__(self, folder: str, formats: list[str], clock: Callable[[], int], purge_step: int | None = None):
        outputs = [ResumedTensorBoard(folder, purge_step) if f == "tensorboard" and purge_step
                   else make_output_format(f, folder) for f in formats]
        super().__init__(folder, outputs)
        self.clock = clock

    def dump(self, step: int = 0) -> None:
        super().dump(self.clock())


class IterationCheckpoint(CheckpointCallback):
    """SB3's checkpoint callback; each zip is named by ``trainer.updates``."""

    def __init__(self, trainer: FeatureTrainer, save_path: str, name_prefix: str):
        super().__init__(1, save_path, name_prefix)
        self.trainer = trainer

    def _checkpoint_path(self, checkpoint_type: str = "", extension: str = "") -> str:
        name = f"{self.name_prefix}_{checkpoint_type}{self.trainer.updates}_iterations.{extension}"
        return str(Path(self.save_path) / name)
