"""The training loop for gradient-trained learners (static, actor, critics, threshold).

Each iteration draws a batch (shuffled epochs, seeded), augments it on its device, and hands
it to :meth:`Learner.train_step`. Every ``eval_every`` iterations the validation split is
routed through the shared evaluator; every ``checkpoint_every`` iterations (and at the end)
the learner, the iteration, the sampler's state and every random generator a step draws from
are saved atomically, so a resumed run continues exactly where the checkpoint left it.

Ctrl-C and SIGTERM (:mod:`routing_rl.training.interrupt`) stop the loop between two
iterations: the one in progress finishes (its validation and checkpoint included), the state
after it is checkpointed, and :class:`~routing_rl.training.interrupt.Interrupted` is raised;
``--resume`` from there gives the run, bit for bit, that no signal would have given.

The NaN guard (:mod:`routing_rl.training.guard`): a non-finite loss, non-finite weights or
batch-norm statistics before a validation or checkpoint, or non-finite router scores stop
training with :class:`~routing_rl.training.guard.NonFiniteLossError`; nothing diverged is
evaluated or saved, so the last checkpoint is the last good state.

Under torchrun (``distributed``) every process draws and augments the same global batch and
trains on its shard of it (see :mod:`routing_rl.training.distributed`); the logged scalars are
averaged over the processes. Only the caller decides who writes: it passes ``monitor``,
``save`` and ``after_validation`` to rank 0 alone.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from routing_rl.agents.base import Learner
from routing_rl.core.seeds import seeded_generator
from routing_rl.training.config import TrainConfig
from routing_rl.training.distributed import Distributed
from routing_rl.data import Split
from routing_rl.data import augment as image_augment
from routing_rl.envs.task import RoutingTask
from routing_rl.training.acceleration import begin_step, precision_context
from routing_rl.training.episodes import EpisodeSampler
from routing_rl.training.evaluate import NonFiniteEvaluationError, evaluate
from routing_rl.training.checkpoint import checkpoint_identity, random_states, restore_random_states
from routing_rl.training.guard import NonFiniteLossError, check_finite, diverged
from routing_rl.training.interrupt import Interrupted, stop_between_steps, stop_requested
from routing_rl.training.sgd import lr_schedule
from routing_rl.training.monitor import HISTOGRAM_EXAMPLES, Monitor, evaluation_scalars

LOG_EVERY = 10
"""Iterations between TensorBoard scalar writes: often enough for smooth curves, rarely
enough that logging stays off the profile."""


class BatchSampler:
    """Shuffled epochs over ``n`` examples, drawn ``batch_size`` at a time, resumable."""

    def __init__(self, n: int, batch_size: int, seed: int):
        if n < 1:
            raise ValueError("the training split is empty")
        self.n, self.batch_size = n, batch_size
        self.generator = seeded_generator(seed)
        self.order = torch.randperm(n, generator=self.generator)
        self.position = 0

    def next(self) -> torch.Tensor:
        picked = []
        needed = self.batch_size
        while needed:
            if self.position == self.n:
                self.order = torch.randperm(self.n, generator=self.generator)
                self.position = 0
            take = min(needed, self.n - self.position)
            picked.append(self.order[self.position : self.position + take])
            self.position += take
            needed -= take
        return torch.cat(picked)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "order": self.order, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.order, self.position = state["order"], state["position"]


@dataclass
class TrainingState:
    """What the loop carries between iterations and across a resume."""

    iteration: int = 0
    history: list[dict] = field(default_factory=list)  # one entry per validation evaluation
    train_seconds: float = 0.0


def evaluate_on_validation(learner: Learner, validation: Split, iteration: int, monitor: Monitor | None,
             task: RoutingTask | None = None, kept: str = "") -> dict:
    """Evaluate on the validation split at every k_cpt the learner is judged at (classes and
    sources named by ``task``; clip by clip with its memory for a split of sequences); log the
    results and histograms of the router scores on the first validation examples.
    Non-finite scores (weights so large that activations overflow) raise
    :class:`NonFiniteLossError`, ``kept`` saying which checkpoint survives."""
    entry = {"iteration": iteration, "evaluations": []}
    names = {"classes": task.classes, "sources": task.sources} if task is not None else {}
    for k_cpt in learner.eval_k_cpts():
        try:
            result = evaluate(learner.net, validation, k_cpt, learner.decide(k_cpt), task=task, **names)
        except NonFiniteEvaluationError as error:
            if error.bad_inputs:  # the data's fault, not training's: its own message
                raise
            # finite weights whose activations overflow: training diverged, say so as the guard does
            raise NonFiniteLossError(diverged("the net's validation outputs became NaN", iteration,
                                              scheduled_lr(learner.config, iteration - 1), kept)) from None
        entry["evaluations"].append(result)
        if monitor is not None:
            suffix = "" if len(learner.eval_k_cpts()) == 1 else f"_k{k_cpt:g}"
            monitor.scalars(evaluation_scalars(result, "val" + suffix), iteration)
    if monitor is not None:
        monitor.validated(entry["evaluations"][0]["accuracy"], iteration)
    if monitor is not None and learner.net.junctions and validation.frames == 1:
        learner.net.eval()
        with torch.no_grad():
            images = validation.images[:HISTOGRAM_EXAMPLES].to(learner.device)
            scores = learner.net(images, learner.eval_k_cpts()[0]).scores
        if not bool(torch.stack([s.isfinite().all() for s in scores.values()]).all()):
            raise NonFiniteLossError(diverged("the router scores became non-finite", iteration,
                                              scheduled_lr(learner.config, iteration - 1), kept))
        monitor.histograms({f"routing/scores/{junction}": s for junction, s in scores.items()}, iteration)
    return entry


def fit(
    learner: Learner,
    train: Split,
    validation: Split,
    config: TrainConfig,
    monitor: Monitor | None = None,
    save: Callable[[dict], None] | None = None,
    resume: dict | None = None,
    after_validation: Callable[[dict], None] | None = None,
    task: RoutingTask | None = None,
    distributed: Distributed | None = None,
) -> TrainingState:
    """Train ``learner`` for ``config.iterations`` iterations.

    Args:
        train: the training split, on any device; batches move to the learner's device.
        validation: the validation split, on any device.
        monitor: where scalars, histograms and the progress bar go (None: nowhere).
        save: called with a checkpoint dict at every checkpoint; the caller writes it.
        resume: a checkpoint dict from an earlier ``save``; training continues from it
            (the caller has checked that it is this run's:
            :func:`~routing_rl.training.checkpoint.load_checkpoint`).
        after_validation: called with each history entry (figures, for example).
        task: the routing task the splits come from: its augmentation and its class and
            source names (None: the paper's image augmentation, classes by number). For
            splits of sequences (``images (N, T, ...)``) batches are the next frames of clips
            in flight with the task's memory carried
            (:class:`~routing_rl.training.episodes.EpisodeSampler`), not augmented.
        distributed: this process's place among data-parallel processes, whose learner
            :meth:`~routing_rl.agents.base.SGDLearner.distribute` has prepared; None for one process.
    """
    augment = task.augment if task is not None else image_augment
    device = learner.device
    precision = precision_context(device, config.precision)
    episodic = train.frames > 1
    if episodic and task is None:
        raise ValueError("training on a split of sequences carries the task's memory from frame to frame; pass task=")
    train = train.to(device)
    if episodic:
        sampler = EpisodeSampler(task, train, config.batch_size, config.seed)
    else:
        sampler = BatchSampler(len(train), config.batch_size, config.seed)
    augment_generator = seeded_generator(config.seed + 1, device)
    state = TrainingState()
    if resume is not None:
        learner.load_state_dict(resume["learner"])
        sampler.load_state_dict(resume["sampler"])
        augment_generator.set_state(resume["augment_generator"])
        restore_random_states(resume.get("random_states"))
        state = TrainingState(**resume["training_state"])

    saved = [state.iteration if resume is not None else None]

    def kept() -> str:
        if save is None:
            return ""
        if saved[0] is None:
            return "no checkpoint had been written yet"
        return f"the checkpoint of iteration {saved[0]} is kept"

    def checkpoint() -> None:
        if save is not None:
            save(
                {
                    "learner": learner.state_dict(),
                    "sampler": sampler.state_dict(),
                    "augment_generator": augment_generator.get_state(),
                    "random_states": random_states(),
                    "training_state": vars(state),
                    "identity": checkpoint_identity(config),
                }
            )
            saved[0] = state.iteration

    learner.net.train()
    started = time.perf_counter() - state.train_seconds
    window_start, window_examples = time.perf_counter(), 0
    with stop_between_steps():
        while state.iteration < config.iterations:
            if agreed_stop(distributed):
                break
            if episodic:
                batch = sampler.next(learner.net, learner.eval_k_cpts()[0])
            else:
                index = sampler.next().to(device)
                images = augment(train.images[index], train.source[index], augment_generator)
                batch = Split(images, train.labels[index], train.source[index])
            examples = len(batch)
            if distributed is not None:
                shard = distributed.shard(examples)
                batch = Split(batch.images[shard], batch.labels[shard], batch.source[shard])
            begin_step(config.cuda_graphs)
            try:
                with precision:
                    stats = learner.train_step(batch, state.iteration)
            except RuntimeError:  # NaN scores stop sampling (torch.multinomial) before any loss exists
                if finite(learner.net):
                    raise
                raise NonFiniteLossError(diverged("the weights became non-finite", state.iteration,
                                                  scheduled_lr(config, state.iteration), kept())) from None
            if distributed is not None:
                stats = distributed.mean_scalars(stats, distributed.share(examples))
            check_finite(stats["losses/total"], "training loss", state.iteration + 1, scheduled_lr(config, state.iteration), kept())
            state.iteration += 1
            validating = state.iteration % config.eval_every == 0 or state.iteration == config.iterations
            if (validating or state.iteration % config.checkpoint_every == 0) and not finite(learner.net):
                # the step's loss was finite but its update was not: never evaluate or save such weights
                raise NonFiniteLossError(diverged("the weights became non-finite", state.iteration,
                                                  scheduled_lr(config, state.iteration - 1), kept()))
            window_examples += examples
            if monitor is not None and (state.iteration % LOG_EVERY == 0 or state.iteration == config.iterations):
                now = time.perf_counter()
                stats["charts/examples_per_second"] = window_examples / max(now - window_start, 1e-9)
                window_start, window_examples = now, 0
                monitor.scalars(stats, state.iteration)
            if monitor is not None:
                shown = {k.split("/")[-1]: v for k, v in stats.items() if k in SHOWN_IN_PROGRESS}
                monitor.progress(1, examples, stats["losses/total"], **shown)
            if validating:
                learner.before_evaluation(train, state.iteration)
                entry = evaluate_on_validation(learner, validation, state.iteration, monitor, task, kept())
                state.history.append(entry)
                if after_validation is not None:
                    after_validation(entry)
                learner.net.train()
            state.train_seconds = time.perf_counter() - started
            if state.iteration % config.checkpoint_every == 0 and state.iteration < config.iterations:
                checkpoint()
        state.train_seconds = time.perf_counter() - started
        checkpoint()
        if agreed_stop(distributed):
            raise Interrupted(stop_requested() or signal.SIGTERM, state.iteration)
    return state


def agreed_stop(distributed: Distributed | None) -> bool:
    """Whether a signal asked this process, or under torchrun any process, to stop (one
    ``all_reduce``: every process stops after the same iteration)."""
    asked = stop_requested() is not None
    if distributed is None:
        return asked
    return bool(distributed.sum(torch.tensor([float(asked)], device=distributed.device)).item() > 0)


def scheduled_lr(config: TrainConfig, iteration: int) -> float:
    """The learning rate the config schedules for ``iteration``, for messages."""
    return lr_schedule(config.options.lr, iteration, config.lr_half_life, config.lr_warmup)


def finite(net: torch.nn.Module) -> bool:
    """Whether every parameter and buffer (batch-norm statistics) of ``net`` is finite (one
    device synchronisation)."""
    tensors = [t for t in (*net.parameters(), *net.buffers()) if t.is_floating_point()]
    return bool(torch.stack([t.isfinite().all() for t in tensors]).all())


SHOWN_IN_PROGRESS = ("charts/train_accuracy", "charts/train_mean_macs", "charts/examples_per_second")
