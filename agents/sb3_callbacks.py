"""SB3 callbacks that log routing quantities with the project's tags (see
:mod:`routing_rl.training.monitor`), through SB3's own logger (so into its TensorBoard files).

* :class:`TrainingCharts` — from the infos of recently finished training episodes:
  ``charts/train_accuracy``, ``charts/train_mean_macs``, ``charts/train_c_err``; from the
  environment's feature trainer: ``losses/c_err``, ``losses/c_mod``, ``losses/total``,
  ``charts/lr``; ``charts/examples_per_second``; for DQN, ``charts/epsilon``.
* :class:`Validation` — run by SB3's ``EvalCallback`` after each of its evaluations: the
  shared evaluator (:func:`routing_rl.training.evaluate.evaluate`) on the validation split, routing by
  the agent, at every k_cpt the run is judged at. Logs ``charts/val_accuracy``,
  ``charts/val_mean_macs``, ``routing/val_fraction/<leaf>``, the agent's scores at each
  junction (``routing/scores/<junction>``) and the figures it is given
  (``figures/node_link``) and keeps a history; :func:`~routing_rl.agents.sb3.train_sb3` runs it
  once more at the end when the last evaluation came before the last iteration.
* :class:`EveryIterations` — runs its child callback each time the feature trainer completes
  another ``every`` iterations (optimiser steps of ``batch_size`` finished episodes, i.e.
  images), the clock every learner's schedule runs on.
* :class:`IterationCheckpoint` — SB3's ``CheckpointCallback`` naming each zip by iteration,
  ``{prefix}_{iteration}_iterations.zip``.
* :class:`ImageBudget` — ends ``learn()`` once the feature trainer has taken ``iterations`` steps.
* :class:`StopBetweenSteps` — raises :class:`~routing_rl.training.interrupt.Interrupted` at
  the next clean point once Ctrl-C or SIGTERM asked for a stop: the start of a rollout, and
  for PPO and A2C of each environment step within one.
* :class:`ProgressCallback` — the run's :class:`~routing_rl.training.monitor.Progress` (a bar
  on a terminal, periodic lines elsewhere), stepped by the feature trainer's iterations.
* :class:`IterationLogger` — SB3's logger, writing every record at the iteration, so that
  TensorBoard's step axis is the same for SB3 agents and the paper's learners; its
  ``progress.csv`` (:class:`RunCSV`) and :class:`RunEvaluation`'s ``evaluations.npz`` are
  never written in place, and a resumed run keeps their earlier part.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
import zipfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from routing_rl.envs.joint import FeatureTrainer
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback, EvalCallback, EventCallback
from stable_baselines3.common.logger import CSVOutputFormat, Figure, Logger, TensorBoardOutputFormat
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from torch.utils.hooks import RemovableHandle
from torch.utils.tensorboard import SummaryWriter

from routing_rl.core.files import atomic_write, atomic_write_text
from routing_rl.data import Split
from routing_rl.training.checkpoint import CheckpointError
from routing_rl.training.evaluate import evaluate
from routing_rl.training.interrupt import Interrupted, stop_requested
from routing_rl.core.execution import Decide
from routing_rl.core.graph import RoutedNet
from routing_rl.training.monitor import HISTOGRAM_EXAMPLES, Progress, evaluation_scalars

PROGRESS_FILE = "progress.csv"
EVALUATIONS_FILE = "evaluations.npz"
ITERATION = "iteration"
"""The column of ``progress.csv`` holding each row's iteration (TensorBoard's step)."""
TENSORBOARD_ONLY = ("stdout", "log", "json", "csv")
"""The logger's formats a figure or a histogram is kept out of."""


def joint_scalars(trainer: FeatureTrainer) -> dict[str, float]:
    """The feature trainer's latest scalars and their ``losses/total``, as the learners log theirs."""
    losses = [value for tag, value in trainer.last.items() if tag.startswith("losses/")]
    return {**trainer.last, "losses/total": sum(losses)} if losses else dict(trainer.last)


class TrainingCharts(BaseCallback):
    """Routing statistics of the last ``window`` finished training episodes, the feature
    trainer's scalars, and the images trained on per second of wall time since the last
    rollout that completed an iteration."""

    def __init__(self, trainer: FeatureTrainer, window: int = 1000):
        super().__init__()
        self.trainer = trainer
        self.episodes: deque[tuple[int, bool, float]] = deque(maxlen=window)
        self.since = (time.perf_counter(), trainer.updates)  # (wall time, iteration) the rate is measured from

    def _on_training_start(self) -> None:
        self.since = (time.perf_counter(), self.trainer.updates)

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
        for tag, value in joint_scalars(self.trainer).items():
            self.logger.record(tag, value)
        started, iteration = self.since
        if self.trainer.updates > iteration:
            now = time.perf_counter()
            images = (self.trainer.updates - iteration) * self.trainer.options.batch_size
            self.logger.record("charts/examples_per_second", images / max(now - started, 1e-9))
            self.since = (now, self.trainer.updates)
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
        scores: images -> ``{junction: (B, actions) scores}``, the agent's at every junction,
            drawn as the histograms ``routing/scores/<junction>`` of the first
            :data:`~routing_rl.training.monitor.HISTOGRAM_EXAMPLES` validation images (images
            only: a split of frames has none); None: none.
    """

    def __init__(self, net: RoutedNet, validation: Split, k_cpts: list[float], decide: Callable[[float], Decide],
                 path: Path, clock: Callable[[], int], history: list[dict] | None = None, task=None,
                 progress: Progress | None = None, figures: Callable[[dict], dict] | None = None,
                 scores: Callable[[torch.Tensor], dict[str, torch.Tensor]] | None = None):
        super().__init__()
        self.net, self.validation, self.k_cpts, self.decide, self.task = net, validation, k_cpts, decide, task
        self.progress = progress
        self.clock, self.figures, self.scores = clock, figures, scores
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
            self.logger.record(tag, Figure(figure, close=True), exclude=TENSORBOARD_ONLY)
        if self.scores is not None and self.net.junctions and self.validation.frames == 1:
            images = self.validation.images[:HISTOGRAM_EXAMPLES].to(next(self.net.parameters()).device)
            for junction, scores in self.scores(images).items():
                self.logger.record(f"routing/scores/{junction}", scores.cpu(), exclude=TENSORBOARD_ONLY)
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
    """Raises :class:`~routing_rl.training.interrupt.Interrupted` at the first clean point
    after a signal asked for a stop: SB3 has stored the last environment step (and trained on
    it, if it trains then) and has drawn nothing for the next. ``on_step`` is no such point:
    it comes between an environment step and the storing of its transition.

    Such points are the start of a rollout (DQN's rollout is one vector step) and, in PPO's
    and A2C's rollouts of ``n_steps`` vector steps, the policy's forward pass that picks each
    step's actions (a forward pre-hook, while ``learn()`` runs; their ``predict`` and training
    do not call the policy itself). A rollout stopped part way is saved and continued
    (:mod:`~routing_rl.agents.sb3_resume`)."""

    def __init__(self, trainer: FeatureTrainer):
        super().__init__()
        self.trainer = trainer
        self.hook: RemovableHandle | None = None

    def _on_training_start(self) -> None:
        if isinstance(self.model, OnPolicyAlgorithm):
            self.hook = self.model.policy.register_forward_pre_hook(lambda module, args: self.stop_if_requested())

    def _on_step(self) -> bool:
        return True

    def _on_rollout_start(self) -> None:
        self.stop_if_requested()

    def stop_if_requested(self) -> None:
        if stop_requested():
            self.close()
            raise Interrupted(stop_requested(), self.trainer.updates)

    def _on_training_end(self) -> None:
        self.close()

    def close(self) -> None:
        """Remove the forward pre-hook (``learn()`` has ended, or is ending by this stop)."""
        if self.hook is not None:
            self.hook.remove()
            self.hook = None


class ProgressCallback(BaseCallback):
    """Steps ``progress`` by ``trainer.updates``: each iteration is ``batch_size`` images, and
    the loss shown is the feature network's latest (c_err + c_mod)."""

    def __init__(self, trainer: FeatureTrainer, progress: Progress):
        super().__init__()
        self.trainer, self.progress = trainer, progress

    def _on_step(self) -> bool:
        steps = self.trainer.updates - self.progress.iteration
        if steps > 0:
            loss = joint_scalars(self.trainer).get("losses/total")
            self.progress.update(steps, steps * self.trainer.options.batch_size, loss)
        return True


class ResumedTensorBoard(TensorBoardOutputFormat):
    """SB3's TensorBoard output with TensorBoard's ``purge_step``: the events from it on that
    an interrupted process wrote past its last checkpoint are dropped, so no step shows twice.
    Each process writes a new events file."""

    def __init__(self, folder: str, purge_step: int | None):
        self.writer = SummaryWriter(log_dir=folder, purge_step=purge_step)
        self._is_closed = False


class RunCSV(CSVOutputFormat):
    """SB3's CSV output (``progress.csv``) with each row's ``iteration``, in a file of this
    process's own: a resumed run copies the rows it keeps (up to its checkpoint's iteration
    ``resumed_at``; the interrupted process may have written later ones) into a new file that
    replaces the old one, and appends to that. The old file is never written to, so a copy
    of the run folder made of hard links (``cp -al``) keeps it as it was; SB3 would empty it
    in place. ``CheckpointError`` names a file that cannot be read."""

    def __init__(self, path: Path, resumed_at: int | None = None):
        path = Path(path)
        lines = self._kept_lines(path, resumed_at) if resumed_at is not None and path.exists() else []
        atomic_write_text(path, "".join(line + "\n" for line in lines))
        self.file = open(path, "r+")  # SB3's own writing: rows appended, the header rewritten when keys appear
        self.file.seek(0, os.SEEK_END)
        self.keys = lines[0].split(",") if lines else []
        self.separator, self.quotechar = ",", '"'

    @staticmethod
    def _kept_lines(path: Path, resumed_at: int) -> list[str]:
        """The header and the rows of ``path`` up to iteration ``resumed_at`` (every row of a
        file without the column; a row cut short by a killed process is dropped)."""
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise CheckpointError(f"cannot read {path} ({error}); move it away to resume without it") from None
        if not lines or ITERATION not in lines[0].split(","):
            return lines
        column, width = lines[0].split(",").index(ITERATION), len(lines[0].split(","))

        def kept(line: str) -> bool:
            row = next(csv.reader([line]), [])
            return len(row) == width and row[column].isdigit() and int(row[column]) <= resumed_at

        return [lines[0], *filter(kept, lines[1:])]

    def write(self, key_values: dict, key_excluded: dict, step: int = 0) -> None:
        super().write({ITERATION: step, **key_values}, key_excluded, step)


class RunEvaluation(EvalCallback):
    """SB3's ``EvalCallback`` whose ``evaluations.npz`` at ``path`` is replaced whole after each
    evaluation (SB3 rewrites it in place, through any hard link to it). A resumed run passes
    ``resumed_at``, its checkpoint's environment steps: the evaluations up to it are kept, and
    the best mean reward among them is the one to beat (``best_model.zip``'s).
    ``CheckpointError`` names a file that cannot be read."""

    def __init__(self, eval_env, path: Path, resumed_at: int | None = None, **kwargs):
        super().__init__(eval_env, log_path=None, **kwargs)
        self.path = Path(path)
        if resumed_at is not None and self.path.exists():
            try:
                with np.load(self.path, allow_pickle=False) as saved:
                    timesteps, results, lengths = saved["timesteps"], saved["results"], saved["ep_lengths"]
                    successes = saved["successes"] if "successes" in saved else None
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                raise CheckpointError(f"cannot read {self.path} ({error}); move it away to resume without it") from None
            kept = timesteps <= resumed_at
            self.evaluations_timesteps = timesteps[kept].tolist()
            self.evaluations_results = results[kept].tolist()
            self.evaluations_length = lengths[kept].tolist()
            self.evaluations_successes = successes[kept].tolist() if successes is not None else []
            if self.evaluations_results:
                self.best_mean_reward = max(float(np.mean(rewards)) for rewards in self.evaluations_results)

    def _on_step(self) -> bool:
        self.log_path = io.BytesIO()  # SB3 saves its evaluations here when it evaluates
        try:
            go_on = super()._on_step()
            written = self.log_path.getvalue()
        finally:
            self.log_path = None
        if written:
            atomic_write(self.path, lambda stream: stream.write(written))
        return go_on


class IterationLogger(Logger):
    """SB3's logger writing ``progress.csv`` (:class:`RunCSV`) and TensorBoard into
    ``folder``, every dump stepped by ``clock()`` whatever step SB3 passes; a resumed run
    passes ``resumed_at``, its checkpoint's iteration: what the interrupted process logged
    after it is dropped."""

    def __init__(self, folder: str, clock: Callable[[], int], resumed_at: int | None = None):
        purge_step = resumed_at + 1 if resumed_at is not None else None
        super().__init__(folder, [RunCSV(Path(folder) / PROGRESS_FILE, resumed_at), ResumedTensorBoard(folder, purge_step)])
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
