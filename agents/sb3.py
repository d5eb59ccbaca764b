"""Stable-Baselines3 baselines: DQN, PPO and A2C route the net, the env trains its features.

``train_sb3(config, task, run_dir, device)`` trains one agent with SB3's own machinery:
``learn()`` on the batched :class:`~routing_rl.envs.RoutingSB3VecEnv` under ``VecMonitor``, with
joint training of the feature network on the agent's paths; SB3's ``EvalCallback`` (plus the
shared evaluator on the validation split, :mod:`~routing_rl.agents.sb3_callbacks`) and
``CheckpointCallback``; SB3's logger writing TensorBoard and CSV into the run directory.
The returned :class:`SB3Result` is judged like every other learner: ``result.evaluations(test)``
runs :func:`routing_rl.training.evaluate.evaluate` with ``result.decide(k_cpt)``, the agent's
deterministic policy on the same observations the env gives.

Mapping from :class:`~routing_rl.training.config.TrainConfig`:

* ``agent`` dqn / ppo / a2c; DQN explores ε-greedily (``--policy eps-greedy``): SB3's linear
  schedule from ε = 1 down to ``epsilon`` over the first ``exploration_fraction`` of the
  budget; PPO and A2C sample their own softmax policy. Exploration does not decide which
  heads learn: the env's joint training runs on the full tree (``--joint-execution full``; see
  :mod:`~routing_rl.envs.joint`) with every head's cross-entropy weighing 1 on every image
  (``--uniform-weight 1``) at lr 0.02 (``JOINT_LR``): the multi-exit net the confidence
  threshold trains, at the rate its validation chose. Weighing heads by the agent's own paths
  feeds back on itself: heads the agent avoids stop learning, so it keeps avoiding them.
* ``side_heads`` (DQN, on by default): the env also reports, for every junction a path went
  on from, the exit it did not take with the reward that exit would have earned (its head
  is a linear layer on features the path computed anyway), and DQN replays those terminal
  transitions beside its own (:class:`RoutingDQN`). Without them DQN learns the value of a
  deep exit only from its few ε-random exits there, and stays pessimistic about going deep.
* The budget is the one every learner has: ``iterations`` optimiser steps of the feature
  network, each on ``batch_size`` finished episodes — ``iterations × batch_size`` training
  images, whatever the number of environment steps (transitions) their paths take.
  ``learn()`` stops when it is spent (:class:`~routing_rl.agents.sb3_callbacks.ImageBudget`);
  SB3's schedules, ``eval_every``, ``checkpoint_every`` and TensorBoard's step axis run on
  that clock, as for the paper's learners.
* ``batch_size``, ``lr``, ``lr_half_life``, ``momentum``, ``k_l2``, ``talr`` configure joint
  training (:class:`~routing_rl.envs.JointTraining`); ``gamma = 1``: the undiscounted return
  of an episode is exactly ``-c_inf``.
* ``error_cost``: the c_err in the leaf's reward, cross-entropy by default (the paper's):
  ``zero_one``, the judge's error, makes DQN cheaper on some tasks, but where depth pays for
  one source a 0-or-1 reward gives its regression less to learn from.
* ``double_q`` (on for DQN; ``--double-q false`` for SB3's own targets): double Q-learning's
  targets (:meth:`RoutingDQN.train`): a one-step max's upward bias is paid again at every
  junction a continue passes, so it grows with depth and sends images deeper than they pay for.
* ``exit_confidence`` (off by default): the observation also carries the log top softmax
  probability of each head among the junction's sinks (the confidence threshold's signal;
  :func:`~routing_rl.nets.router.read_exit_confidence`); where the heads are weak it routes worse.
* ``n_envs`` examples in flight; ``sb3_kwargs``: keyword arguments for the SB3 algorithm over
  :func:`sb3_kwargs`' choices for routing (documented there). SB3 cannot mask actions, so the
  envs clip an action past a junction's last sink to the last one (``clip_actions``).

The measurements behind these choices: ``docs/results/suite.md``, "The SB3 agents' settings".

Saving: :class:`RoutingDQN` / :class:`RoutingPPO` / :class:`RoutingA2C` are SB3's classes
whose zip also holds the feature network and its optimiser (``routed_net.pth``,
``feature_trainer.pth``), so every checkpoint is a complete router + classifier, written
atomically. :func:`load_sb3` returns ``(model, net)`` without running code from the file:
where SB3's own ``load`` unpickles the zip's ``data``, it rebuilds the model from the
plain-JSON ``routing`` settings saved beside them, loads the ``.pth`` state dicts with
``torch.load(weights_only=True)`` and restores the plain-number counters (:data:`RESTORED_COUNTERS`).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle
import re
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from routing_rl.agents.sb3_callbacks import (
    EVALUATIONS_FILE,
    PROGRESS_FILE,
    EveryIterations,
    ImageBudget,
    IterationCheckpoint,
    IterationLogger,
    StopBetweenSteps,
    ProgressCallback,
    RunEvaluation,
    TrainingCharts,
    Validation,
)
from routing_rl.agents.sb3_resume import SUFFIX as STATE_SUFFIX
from routing_rl.agents.sb3_resume import restore_resume_state, save_resume_state
from routing_rl.envs.joint import FeatureTrainer, JointTraining
from routing_rl.envs.observation import DESCRIPTOR_BOUND, ObservationLayout
from routing_rl.envs.image_task import ImageTask
from routing_rl.envs.sb3_vec_env import RoutingSB3VecEnv
from routing_rl.envs.traffic import SideExits
from routing_rl.envs.task import RoutingTask, task_from_env
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback, CallbackList
from stable_baselines3.common.vec_env import VecMonitor

from dataclasses import dataclass, field
from typing import ClassVar

from routing_rl.training.config import COUNT, EXECUTIONS, KIND_NAMES, NON_NEGATIVE, POSITIVE, TrainConfig, check_range
from routing_rl.training.learners import JOINT_LR, EnvTraining, LearnerOptions, LearnerSpec, register_learner
from routing_rl.core.files import atomic_write
from routing_rl.core.k_cpt import K_CPT_UNIT, CostModel, eval_values
from routing_rl.core.seeds import manual_seed
from routing_rl.training.checkpoint import CheckpointError
from routing_rl.training.guard import NonFiniteLossError, diverged
from routing_rl.training.interrupt import Interrupted, stop_between_steps, stop_requested
from routing_rl.training.monitor import Progress
from routing_rl.data import RoutingDataset, Split
from routing_rl.training.evaluate import evaluate
from routing_rl.core.execution import Decide, Junction
from routing_rl.core.graph import RoutedNet
from routing_rl.nets.multiscale import build
from routing_rl.nets.seeding import seeded_net
from routing_rl.training.splits import RunError, training_splits

SB3_AGENTS = ("dqn", "ppo", "a2c")
"""The learners this module registers."""
SB3_MAX_SEED = 2**32 - 2
"""SB3 seeds NumPy's legacy generator (32-bit seeds), the eval env with ``seed + 1``."""
_SHARE = ((0, True), (1, True), "in [0, 1]")
SB3_RANGES = {  # SB3 keyword argument: range, as RANGES; SB3 accepts some of these out of range and trains on
    "learning_rate": POSITIVE, "gamma": _SHARE, "gae_lambda": _SHARE, "ent_coef": NON_NEGATIVE,
    "vf_coef": NON_NEGATIVE, "max_grad_norm": POSITIVE, "clip_range": POSITIVE, "clip_range_vf": POSITIVE,
    "target_kl": POSITIVE, "rms_prop_eps": POSITIVE, "tau": ((0, False), (1, True), "in (0, 1]"),
    "exploration_fraction": _SHARE, "exploration_initial_eps": _SHARE, "exploration_final_eps": _SHARE,
    "batch_size": COUNT, "buffer_size": COUNT, "n_steps": COUNT, "n_epochs": COUNT, "target_update_interval": COUNT,
    "stats_window_size": COUNT, "train_freq": COUNT, "learning_starts": ((0, True), (math.inf, False), "an integer >= 0"),
    "verbose": ((0, True), (2, True), "0, 1 or 2"),
    "gradient_steps": ((-1, True), (math.inf, False), "a positive integer, or -1 (as many as the env steps taken)"),
    "sde_sample_freq": ((-1, True), (math.inf, False), "a positive integer, or -1 (only at the start of a rollout)"),
}
SB3_INTEGERS = {"batch_size", "buffer_size", "n_steps", "n_epochs", "target_update_interval", "stats_window_size",
                "train_freq", "learning_starts", "verbose", "gradient_steps", "sde_sample_freq"}
SB3_NULLABLE = {"clip_range_vf", "target_kl", "policy_kwargs", "replay_buffer_kwargs", "rollout_buffer_kwargs"}
SB3_FLAGS = {"normalize_advantage", "use_sde", "optimize_memory_usage", "use_rms_prop"}
SB3_OBJECTS = {"policy_kwargs", "replay_buffer_kwargs", "rollout_buffer_kwargs"}
SB3_RESERVED = {
    "device": "set the device with --device, not in --sb3-kwargs",
    "seed": "set the seed with --seed, not in --sb3-kwargs",
    "tensorboard_log": "SB3 logs into the run directory already; drop tensorboard_log",
    "_init_setup_model": "drop _init_setup_model",
}
"""SB3 keyword arguments the run sets itself."""


SB3_DEFAULTS = {
    "dqn": dict(learning_rate=5e-4, batch_size=256, train_freq=1, exploration_fraction=0.5,
                exploration_initial_eps=1.0, policy_kwargs=dict(net_arch=[128, 128])),
    "ppo": dict(learning_rate=3e-4, n_steps=16, n_epochs=4, ent_coef=0.01, policy_kwargs=dict(net_arch=[128, 128])),
    "a2c": dict(learning_rate=7e-4, n_steps=8, ent_coef=0.01, policy_kwargs=dict(net_arch=[128, 128])),
}
"""Per-agent SB3 keyword arguments that do not depend on the budget; see :func:`sb3_kwargs`."""

HISTORY_FILE = "sb3_history.json"
CHECKPOINTS = "checkpoints"
MODEL_FILE = "model.zip"
STAND_IN_ENVS = 8
"""Envs of the stand-in vector env :func:`check_sb3_kwargs` builds SB3's model on."""
STAND_IN_ROWS = 1_000
"""Transitions of the stand-in's replay buffer (DQN)."""
PROBE_EXAMPLES = 64
"""Validation examples run through the net to tell a diverged feature network from a bug."""
RUN_FILES = (HISTORY_FILE, MODEL_FILE, "best_model.zip", EVALUATIONS_FILE, PROGRESS_FILE, f"{CHECKPOINTS}/*_iterations.zip",
             f"{CHECKPOINTS}/*_iterations{STATE_SUFFIX}")
"""What an SB3 run writes into its run directory (glob patterns), beside the TensorBoard files."""
CHECKPOINT_NAME = re.compile(r"^.+_(\d+)_iterations\.zip$")
IDENTITY = ("agent", "env", "dataset", "arch", "width")
"""The routing settings a checkpoint must share with the run that resumes from it."""
RESTORED_COUNTERS = ("num_timesteps", "_total_timesteps", "_num_timesteps_at_start", "_episode_num", "_n_updates",
                     "_n_calls", "_current_progress_remaining", "exploration_rate")
"""Plain-number attributes of a saved model that :func:`load_sb3` restores (the rest of SB3's
``data`` is either rebuilt from the routing settings or pickled, and then never loaded)."""


class SB3LoadError(CheckpointError):
    """A saved SB3 zip cannot be loaded safely; the message names the file and why."""


class RoutedNetSaving:
    """Mixin for an SB3 algorithm: the env's feature network and its trainer are saved in
    the model's zip and restored by ``load`` (built from ``routing`` when not passed in)."""

    def __init__(self, *args, routed_net: RoutedNet | None = None, feature_trainer: FeatureTrainer | None = None,
                 routing: dict | None = None, **kwargs):
        self.routed_net = routed_net
        self.feature_trainer = feature_trainer
        self.routing = routing  # JSON: agent, env, arch, width, classes, k_cpt, joint options
        self.iterations: int | None = None  # the budget in feature-trainer steps, set by train_sb3
        super().__init__(*args, **kwargs)

    def _update_current_progress_remaining(self, num_timesteps: int, total_timesteps: int) -> None:
        """SB3's schedules run on the image budget when there is one: the share of
        ``iterations`` not yet spent."""
        if self.iterations is None:
            super()._update_current_progress_remaining(num_timesteps, total_timesteps)
        else:
            self._current_progress_remaining = max(0.0, 1.0 - self.feature_trainer.updates / self.iterations)

    def _setup_model(self) -> None:
        super()._setup_model()
        if self.routed_net is None:
            if self.routing.get("arch") is None:
                raise ValueError("this model routes a hand-built net; pass it: load_sb3(path, net=...)")
            self.routed_net = self._build_net()
        if self.feature_trainer is None:
            self.feature_trainer = FeatureTrainer(self.routed_net, JointTraining(**self.routing["joint"]))

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "iterations"]

    def _build_net(self) -> RoutedNet:
        return saved_net(self.routing, saved_task(self.routing), self.device)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        state_dicts, variables = super()._get_torch_save_params()
        return [*state_dicts, "routed_net", "feature_trainer"], variables

    def save(self, path, exclude=None, include=None) -> None:
        """SB3's ``save``, written atomically when ``path`` is a file name (``.zip`` added as SB3 does)."""
        if not isinstance(path, (str, Path)):
            return super().save(path, exclude, include)
        path = Path(path)
        if path.suffix != ".zip":
            path = path.with_name(path.name + ".zip")
        write = super().save
        atomic_write(path, lambda stream: write(stream, exclude, include))

    @classmethod
    def load(cls, path, env=None, device="auto", **kwargs):
        """:func:`load_sb3`'s model: SB3's own ``load`` would unpickle code from the zip."""
        if kwargs:
            raise TypeError(f"{cls.__name__}.load takes path, env and device only, not {', '.join(kwargs)}")
        return load_sb3(path, env=env, device=device)[0]


class RoutingDQN(RoutedNetSaving, DQN):
    """SB3's DQN, whose saved zip also holds the routed net and its feature trainer.

    When its training env records side exits (:class:`~routing_rl.envs.traffic.SideExits`:
    the exits its paths passed and did not take, with the rewards they would have earned),
    they go into the replay buffer beside its own transitions, in rows of ``n_envs`` as SB3's
    buffer stores them (a remainder waits for the next step).
    """

    def __init__(self, *args, double_q: bool = False, **kwargs):
        self._side_exits: SideExits | None = None  # recorded, short of a full buffer row
        self.double_q = double_q
        super().__init__(*args, **kwargs)

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """SB3's update, or with ``double_q`` double Q-learning's (van Hasselt et al., 2016):
        the target of a transition into junction j' is ``r + Q_target(s', argmax_a Q(s', a))``.
        A one-step target takes ``max_a Q_target(s', a)``, and the max of two noisy estimates
        of nearly equal sinks ("continue" and "exit" are often within a few hundredths) is
        biased upwards; the bias is paid at every junction a continue passes, so it grows
        with depth and makes going on look better than it is."""
        if not self.double_q:
            return super().train(gradient_steps, batch_size)
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        losses = []
        for _ in range(gradient_steps):
            batch = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = batch.discounts if batch.discounts is not None else self.gamma
            with torch.no_grad():
                greedy = self.q_net(batch.next_observations).argmax(dim=1, keepdim=True)
                next_values = self.q_net_target(batch.next_observations).gather(1, greedy)
                targets = batch.rewards + (1 - batch.dones) * discounts * next_values
            values = self.q_net(batch.observations).gather(1, batch.actions.long())
            loss = torch.nn.functional.smooth_l1_loss(values, targets)
            losses.append(loss.item())
            self.policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        self._n_updates += gradient_steps
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/loss", np.mean(losses))

    def _store_transition(self, replay_buffer, buffer_action, new_obs, reward, dones, infos) -> None:
        super()._store_transition(replay_buffer, buffer_action, new_obs, reward, dones, infos)
        side = self.env.unwrapped.traffic.take_side_exits()
        if side is None:
            return
        pending = side if self._side_exits is None else SideExits.concatenate([self._side_exits, side])
        n = self.n_envs
        for first in range(0, len(pending) - n + 1, n):
            row = pending[first:first + n]
            replay_buffer.add(row.observations, row.terminal, row.actions, row.rewards.astype(np.float32),
                              np.ones(n, dtype=bool), [{}] * n)
        self._side_exits = pending[len(pending) // n * n:]

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_side_exits"]


class ResumableRollouts:
    """Mixin for SB3's on-policy algorithms: a rollout that a signal stopped part way
    (:class:`~routing_rl.agents.sb3_callbacks.StopBetweenSteps`) goes on where it stopped once
    :func:`~routing_rl.agents.sb3_resume.restore_resume_state` has put its steps back into the
    rollout buffer and set :attr:`resumed_steps`; SB3 would empty the buffer and collect
    ``n_steps`` afresh."""

    resumed_steps = 0
    """Steps of the rollout in the buffer that the next :meth:`collect_rollouts` completes."""

    def collect_rollouts(self, env, callback, rollout_buffer, n_rollout_steps: int) -> bool:
        done, self.resumed_steps = self.resumed_steps, 0
        if not done:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps)
        rollout_buffer.reset = lambda: None  # SB3 empties the buffer first: keep the steps put back
        try:
            return super().collect_rollouts(env, callback, rollout_buffer, n_rollout_steps - done)
        finally:
            del rollout_buffer.reset

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "resumed_steps"]


class RoutingPPO(ResumableRollouts, RoutedNetSaving, PPO):
    """SB3's PPO, whose saved zip also holds the routed net and its feature trainer."""


class RoutingA2C(ResumableRollouts, RoutedNetSaving, A2C):
    """SB3's A2C, whose saved zip also holds the routed net and its feature trainer."""


SB3_CLASSES: dict[str, type[BaseAlgorithm]] = {"dqn": DQN, "ppo": PPO, "a2c": A2C}
"""SB3's own algorithm of each agent: the keyword arguments it takes."""
ALGORITHMS: dict[str, type[BaseAlgorithm]] = {"dqn": RoutingDQN, "ppo": RoutingPPO, "a2c": RoutingA2C}


def sb3_decide(model: BaseAlgorithm, net: RoutedNet, k_cpt: float | None = None) -> Decide:
    """A :data:`~routing_rl.core.execution.Decide` that routes by ``model``'s deterministic policy.

    It builds the env's observation from the junction (descriptor, junction one-hot and, for
    a dynamic-k_cpt agent, ``junction.k_cpt`` or else ``k_cpt``) for all examples there at
    once, and clips actions past a junction's last sink as its training env did.
    """
    layout = ObservationLayout.matching(net, model.observation_space)
    layout.clip_actions = True  # as the env it trained on

    def decide(junction: Junction) -> torch.Tensor:
        cost = junction.k_cpt if junction.k_cpt is not None else k_cpt
        observations = layout.observe(junction.name, junction.descriptor, cost)
        actions, _ = model.predict(observations, deterministic=True)
        sinks = layout.sinks(junction.name, np.asarray(actions, dtype=np.int64).reshape(-1))
        return torch.from_numpy(sinks).to(junction.descriptor.device)

    return decide


def sb3_scores(model: BaseAlgorithm, net: RoutedNet, images: torch.Tensor,
               k_cpt: float | None = None) -> dict[str, torch.Tensor]:
    """The agent's score of each action at every junction, ``images`` run through the whole
    net (eval mode) and seen as the env shows them: DQN's Q-values, PPO's and A2C's action
    logits, the counterpart of the paper's routers' scores."""
    layout = ObservationLayout.matching(net, model.observation_space)
    training, scores = net.training, {}
    net.eval()
    with torch.no_grad():
        for name, descriptor in net(images).descriptors.items():
            observations = model.policy.obs_to_tensor(layout.observe(name, descriptor, k_cpt))[0]
            scores[name] = (model.q_net(observations) if hasattr(model, "q_net")
                            else model.policy.get_distribution(observations).distribution.logits)
    net.train(training)
    return scores


@dataclass
class SB3Result:
    """A trained SB3 agent and the net it routes.

    history: one entry per validation, ``{"iteration": iterations, "evaluations": [...]}``.
    k_cpts: the costs it is judged at (every paper value for a dynamic k_cpt).
    """

    model: BaseAlgorithm
    net: RoutedNet
    history: list[dict]
    k_cpts: list[float]
    classes: tuple[str, ...] | None = None
    sources: tuple[str, ...] | None = None
    task: RoutingTask | None = None  # carries the memory of episodes of frames

    def decide(self, k_cpt: float | None = None) -> Decide:
        return sb3_decide(self.model, self.net, k_cpt)

    def evaluations(self, split: Split) -> list[dict]:
        """The shared evaluator on ``split``, one result per k_cpt in :attr:`k_cpts`."""
        return [evaluate(self.net, split, k, self.decide(k), classes=self.classes, sources=self.sources, task=self.task)
                for k in self.k_cpts]


def load_sb3(path: str | Path, env: RoutingSB3VecEnv | None = None, device: str | torch.device = "auto",
             net: RoutedNet | None = None) -> tuple[BaseAlgorithm, RoutedNet]:
    """A saved agent and its feature network: ``(model, net)``, loaded without unpickling
    anything but tensors; :class:`SB3LoadError` naming the file when it cannot be.

    With ``env`` (a :class:`RoutingSB3VecEnv`, maybe under ``VecMonitor``), the saved weights go
    into the env's own net and feature trainer, and the model is ready to ``learn()`` on.
    ``net``: the hand-built net a model was trained on, for nets not built by arch name.
    """
    path = Path(path)
    data, routing = _saved_settings(path)
    task = None
    if env is not None:
        net = env.unwrapped.net
    else:
        task = saved_task(routing)
        if net is None:
            if routing.get("arch") is None:
                raise SB3LoadError(f"{path} routes a hand-built net; pass it: load_sb3(path, net=...)")
            net = saved_net(routing, task, "cpu")
    owned = {"routed_net": net, "feature_trainer": env.unwrapped.trainer if env is not None else None}
    model = ALGORITHMS[routing["agent"]]("MlpPolicy", env, device=device, routing=routing, seed=data.get("seed"),
                                         _init_setup_model=False, **owned, **copy.deepcopy(routing["sb3"]))
    if env is None:
        dynamic = routing["k_cpt"] == "dynamic"
        layout = task.observation_layout(net, dynamic) if task is not None else ObservationLayout(net, dynamic)
        model.observation_space, model.action_space = layout.observation_space, layout.action_space
        model.n_envs = routing["n_envs"]
    model._setup_model()
    try:
        model.set_parameters(str(path), exact_match=True, device=device)
    except (pickle.UnpicklingError, RuntimeError, ValueError, KeyError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise SB3LoadError(f"cannot load the weights in {path}: {_first_line(error)}") from None
    for name in RESTORED_COUNTERS:
        value = data.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(model, name, value)
    return model, model.routed_net


def saved_net(routing: dict, task: RoutingTask | None, device: str | torch.device) -> RoutedNet:
    """A fresh net of the saved arch (its weights are loaded next): ``task``'s (:func:`saved_task`),
    or the paper's multiscale net for models of a dataset in memory; its routers read their
    exits' confidence if the saved run's did."""
    exit_confidence = bool(routing.get("exit_confidence"))
    if task is None:
        return seeded_net(lambda: build(routing["arch"], routing["width"], routing["classes"],
                                        exit_confidence=exit_confidence), 0, device)
    return task.make_net(routing["arch"], routing["width"], device=device, exit_confidence=exit_confidence)


def saved_task(routing: dict) -> RoutingTask | None:
    """The task a saved model was trained on, None for a dataset in memory (the paper's nets)."""
    if routing.get("env") is None:
        return None
    dataset = {"dataset": routing["dataset"]} if routing.get("dataset") else {}
    return task_from_env(routing["env"], **dataset)[0]


def _saved_settings(path: Path) -> tuple[dict, dict]:
    """The zip's ``data`` JSON (read as JSON only) and its routing settings."""
    try:
        with zipfile.ZipFile(path) as archive:
            data = json.loads(archive.read("data"))
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, ValueError) as error:
        raise SB3LoadError(f"cannot read {path}: it is empty, truncated or not an SB3 model zip ({_first_line(error)})") from None
    routing = data.get("routing") if isinstance(data, dict) else None
    if not isinstance(routing, dict) or not {"agent", "sb3", "n_envs", "joint"} <= set(routing) or routing["agent"] not in ALGORITHMS:
        raise SB3LoadError(f"{path} was not saved by this version of routing-rl's SB3 agents (no routing settings); "
                           "train it again")
    if routing.get("k_cpt") == "dynamic" and routing.get("k_cpt_unit") != K_CPT_UNIT:
        raise SB3LoadError(f"{path} was trained when observations gave a dynamic k_cpt as k_cpt × 1e7, not on today's "
                           "log scale, so its policy would misread every k_cpt; train it again")
    return data, routing


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def features_diverged(net: RoutedNet, images: torch.Tensor) -> bool:
    """Whether ``net``'s descriptors (the agent's observations) on ``images`` reach the
    observation bound or are not finite, or its logits are not finite."""
    with torch.no_grad():
        out = net(images)
    descriptors = torch.cat([d.flatten() for d in out.descriptors.values()])
    logits = torch.cat([t.flatten() for t in out.logits.values()])
    return not bool(descriptors.abs().lt(DESCRIPTOR_BOUND).all() and logits.isfinite().all())


def sb3_kwargs(config: TrainConfig, n_envs: int) -> dict:
    """The SB3 algorithm's keyword arguments for ``config``, chosen for routing.

    Every agent: ``gamma = 1`` and a 128-128 MLP (the observation is a 2,000-odd feature
    descriptor). DQN: double Q-learning's targets unless ``--double-q false`` (RoutingDQN's own
    keyword), Adam at 5e-4, batches of 256 transitions, one update per vector step
    with ``n_envs // 64`` gradient steps (one per 64 transitions, so each transition is
    replayed about 4 times); ε from 1 to ``epsilon`` over the first half of the budget (on
    hybrid, cpu-small, k_cpt 4e-9, seeds 0-2: +0.45 ± 0.76 points over the static curve,
    against -0.21 ± 1.05 over the first quarter).
    Its transition counts scale with the budget of ``images = iterations × batch_size`` (an
    episode is 1-7 transitions on a chain, plus a side exit per junction passed): replay
    buffer ``images / 25`` (1,000 to 20,000, about the last 40 iterations' transitions at
    cpu-small: the features keep changing, so old transitions go stale; on hybrid, cpu-small,
    seed 0, 20,000 gave +0.91 points over the static curve where 100,000 gave -0.47),
    learning starts after
    ``images / 100`` (64 to 5,000), the target network is copied every ``images / 50`` (64
    to 10,000, at most once per vector step). PPO: rollouts of 16 steps per env, 4 epochs of
    minibatches of a quarter of the rollout, entropy bonus 0.01; A2C: 8 steps, 0.01.
    ``config.options.sb3_kwargs`` overrides any of them.
    """
    kwargs = dict(SB3_DEFAULTS[config.agent], gamma=1.0)
    images = config.iterations * config.batch_size
    if config.agent == "dqn":
        kwargs.update(double_q=config.options.double_q, exploration_final_eps=config.options.epsilon,
                      gradient_steps=max(1, n_envs // 64),
                      buffer_size=int(np.clip(images // 25, 1_000, 20_000)),
                      learning_starts=int(np.clip(images // 100, 64, 5_000)),
                      target_update_interval=max(n_envs, int(np.clip(images // 50, 64, 10_000))))
    if config.agent == "ppo":
        n_steps = config.options.sb3_kwargs.get("n_steps", kwargs["n_steps"])
        kwargs["batch_size"] = max(1, n_steps * n_envs // 4)
    kwargs.update(config.options.sb3_kwargs)
    return kwargs


def check_sb3_kwargs(config: TrainConfig) -> None:
    """Raise ValueError in one line when SB3 refuses ``config``'s keyword arguments.

    :meth:`TrainConfig.validate` has checked the names (against the algorithm's signature)
    and the types and ranges of the common numbers, including those SB3 accepts and then
    trains on silently (``batch_size`` 0, ``gamma`` NaN). Everything else SB3 checks itself
    when it builds a model: ``policy_kwargs``' contents, ``train_freq``'s form, buffer classes.
    Rather than copy those rules (and let the copy drift from SB3's), the algorithm is built
    here on a tiny stand-in env (a 4-float observation, the routing envs' discrete action)
    with the kwargs :func:`sb3_kwargs` would give it, and its error becomes the message:
    a few milliseconds, before any folder is written. What only takes memory is kept small
    there and sized by :func:`check_sb3_fits` later: at most :data:`STAND_IN_ENVS` envs stand
    in for ``n_envs``, at most :data:`STAND_IN_ROWS` for DQN's ``buffer_size``, and the policy
    is built as given only on the meta device (:func:`sb3_policy`), the stand-in's without
    hidden layers, so that a huge ``net_arch`` allocates nothing.
    """
    options = config.options
    if config.agent not in SB3_AGENTS or not options.sb3_kwargs:
        return
    import warnings

    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    class StandIn(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        action_space = gym.spaces.Discrete(2)

    algorithm = SB3_CLASSES[config.agent]
    try:
        with warnings.catch_warnings():  # e.g. PPO's note on batch sizes: about the stand-in's single env
            warnings.simplefilter("ignore")
            stand_ins = DummyVecEnv([StandIn] * min(options.n_envs, STAND_IN_ENVS))
            sb3_policy(config, StandIn.observation_space, StandIn.action_space)
            kwargs = copy.deepcopy(sb3_kwargs(config, options.n_envs))
            kwargs.pop("double_q", None)  # RoutingDQN's own, checked by its options
            kwargs["policy_kwargs"] = {**kwargs.get("policy_kwargs", {}), "net_arch": []}
            if "buffer_size" in kwargs:
                kwargs["buffer_size"] = min(kwargs["buffer_size"], STAND_IN_ROWS)
            algorithm("MlpPolicy", stand_ins, device="cpu", **kwargs)
    except Exception as error:  # SB3's and torch's own checks raise TypeError, ValueError, AssertionError, ...
        raise ValueError(f"--sb3-kwargs {json.dumps(options.sb3_kwargs)}: SB3's {algorithm.__name__} refuses them "
                         f"({type(error).__name__}: {_first_line(error)})") from None


def check_sb3_fits(config: TrainConfig, task: RoutingTask, device: torch.device) -> None:
    """Raise MemoryError, saying what would fit, when the SB3 agent's vector env, policy or
    buffer cannot fit. The ``n_envs`` examples in flight go through the net as one batch on
    ``device`` (:func:`~routing_rl.training.footprint.check_fits` with ``--n-envs``). SB3's
    policy, built as SB3 builds it from ``--sb3-kwargs`` but on the meta device
    (:func:`sb3_policy`), trains on ``device`` with its gradients, optimiser state and batches
    (:func:`~routing_rl.training.footprint.training_bytes`; DQN's target network too). DQN's
    replay buffer keeps two float32 observations per transition, PPO's and A2C's rollout
    buffer one per env step, in host memory, which a policy on the CPU shares."""
    from routing_rl.training.footprint import FLOAT_BYTES, SUGGESTION_SHARE, available_bytes, check_fits, training_bytes

    n_envs = config.options.n_envs
    check_fits(config, lambda width: task.make_net(config.arch, width, config.dynamic_k_cpt), device,
               batch_size=n_envs, flag="--n-envs")
    net = task.make_net(config.arch, config.width, exit_confidence=config.exit_confidence)
    layout = task.observation_layout(net, config.dynamic_k_cpt)
    floats = int(np.prod(layout.observation_space.shape))
    kwargs = sb3_kwargs(config, n_envs)
    policy, trained = sb3_policy(config, layout.observation_space, layout.action_space)
    batch, batch_name = ((kwargs["n_steps"] * n_envs, "n_steps") if config.agent == "a2c"
                         else (kwargs["batch_size"], "batch_size"))
    parameters = sum(p.numel() for p in policy.parameters())
    net_arch = kwargs.get("policy_kwargs", {}).get("net_arch", SB3_DEFAULTS[config.agent]["policy_kwargs"]["net_arch"])
    policy_part = (f"policy ({parameters:.3g} parameters, net_arch {json.dumps(net_arch)})",
                   training_bytes(policy, trained, max(batch, n_envs)),
                   lambda room: f"lower net_arch in --sb3-kwargs' policy_kwargs (now {json.dumps(net_arch)}) or "
                                f"{batch_name} (now {kwargs[batch_name]})")
    if config.agent == "dqn":
        rows, name, per_row = kwargs["buffer_size"], "replay buffer of buffer_size", 2 * floats * FLOAT_BYTES
    else:
        rows, name, per_row = kwargs["n_steps"] * n_envs, "rollout buffer of n_steps × n_envs", floats * FLOAT_BYTES
    buffer_part = (f"{name} = {rows} observations of {floats} floats", rows * per_row,
                   lambda room: f"lower {'buffer_size' if config.agent == 'dqn' else 'n_steps'} in --sb3-kwargs or "
                                f"--n-envs to at most {room} observations in all")
    on_device = device.type != "cpu"
    for memory, parts in ((torch.device("cpu"), ([] if on_device else [policy_part]) + [buffer_part]),
                          (device, [policy_part] if on_device else [])):
        free = available_bytes(memory)
        need = sum(size for _, size, _ in parts)
        if not parts or free is None or need <= free:
            continue
        gib = 2**30
        largest = max(parts, key=lambda part: part[1])
        room = (int(free * SUGGESTION_SHARE) - need + buffer_part[1]) // per_row
        raise MemoryError(f"out of memory: {config.agent}'s {' and '.join(what for what, _, _ in parts)} "
                          f"{'need' if len(parts) > 1 else 'needs'} about {need / gib:.3g} GiB, but {memory} has "
                          f"{free / gib:.3g} GiB free; {largest[2](max(room, 0))}")


def sb3_policy(config: TrainConfig, observation_space, action_space) -> tuple[torch.nn.Module, list[torch.nn.Parameter]]:
    """The policy SB3 builds for ``config``'s agent and keyword arguments on these spaces, on
    the meta device (nothing allocated, however large ``net_arch``), and the parameters its
    optimiser steps."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    kwargs = copy.deepcopy(sb3_kwargs(config, config.options.n_envs))
    kwargs.pop("double_q", None)  # RoutingDQN's own
    model = SB3_CLASSES[config.agent]("MlpPolicy", None, device="cpu", _init_setup_model=False, **kwargs)

    class OnMeta(model.policy_class):
        device = property(lambda self: torch.device("meta"))  # SB3 moves each part to the policy's device

    on_policy = {"use_sde": model.use_sde} if isinstance(model, OnPolicyAlgorithm) else {}
    with torch.device("meta"):
        policy = OnMeta(observation_space, action_space, lambda _: 0.0, **on_policy, **model.policy_kwargs)
    return policy, [p for group in policy.optimizer.param_groups for p in group["params"]]


def checkpoints(run_dir: Path) -> list[Path]:
    """The run's checkpoint zips, the most iterations first."""
    found = [(int(m.group(1)), p) for p in (Path(run_dir) / CHECKPOINTS).glob("*_iterations.zip")
             if (m := CHECKPOINT_NAME.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint zip with the most iterations, if any."""
    return next(iter(checkpoints(run_dir)), None)


def load_newest(run_dir: Path, env: RoutingSB3VecEnv, device: torch.device,
                routing: dict | None = None) -> tuple[BaseAlgorithm, Path]:
    """The newest checkpoint of ``run_dir`` that loads, and its path; a damaged one (cut short
    by a full disk, say) is reported on stderr and the next older one tried. One whose agent,
    env, dataset, arch or width differ from ``routing``'s (the resuming run's settings) is refused."""
    problems = []
    for path in checkpoints(run_dir):
        if routing is not None:
            check_identity(path, routing)
        try:
            return load_sb3(path, env=env, device=device)[0], path
        except SB3LoadError as error:
            problems.append(str(error))
            print(f"skipping checkpoint {path}: {error}", file=sys.stderr)
    raise SB3LoadError(f"no checkpoint in {Path(run_dir) / CHECKPOINTS} can be loaded: {'; '.join(problems)}")


def check_identity(path: Path, routing: dict) -> None:
    """:class:`SB3LoadError` unless the zip at ``path`` was saved by a run of ``routing``'s agent on its task and net."""
    try:
        saved = _saved_settings(path)[1]
    except SB3LoadError:  # damaged: load_newest reports it and tries the next
        return
    if any(saved.get(name) != routing[name] for name in IDENTITY):
        describe = lambda values: ", ".join(f"{name} {values.get(name)}" for name in IDENTITY if values.get(name) is not None)
        raise SB3LoadError(f"{path} was written by another run ({describe(saved)}), not by this one ({describe(routing)}); "
                           "resume the run it came from, or start this one again with --overwrite")


def step_bound(images: int, n_envs: int, junctions: int) -> int:
    """Environment steps (transitions) within which a vector env of ``n_envs`` finishes
    ``images`` more episodes of at most ``junctions`` steps each: every env finishes one at
    least every ``junctions`` vector steps, the episodes in flight too however far along they
    are, so ``ceil(images / n_envs)`` such rounds finish them all, while all ``n_envs`` envs
    step. (Counting only the images' own steps is short when more envs are in flight than
    images are left: the others step too.)"""
    return -(-images // n_envs) * junctions * n_envs


def train_sb3(config: TrainConfig, task: RoutingTask | RoutingDataset, run_dir: Path, device: torch.device,
              callbacks: Sequence[BaseCallback] = (), resume: bool = False,
              cost: CostModel | None = None, figures: Callable[[dict], dict] | None = None,
              splits: tuple[Split, Split] | None = None) -> SB3Result:
    """Train ``config.agent`` (dqn, ppo or a2c) on ``task`` (a dataset in memory: the paper's
    image task on it) with ``config.iterations × config.batch_size`` training images
    (``config.iterations`` steps of the feature network).

    ``callbacks`` are extra SB3 callbacks. ``resume`` continues from the newest checkpoint in
    ``run_dir/checkpoints`` (policy, feature net and its optimiser), exactly when a signal
    wrote it (:mod:`~routing_rl.agents.sb3_resume`); from a periodic one, DQN's replay buffer
    and the episodes in flight start afresh. Ctrl-C or SIGTERM stop ``learn()`` at the start
    of a rollout, save a checkpoint with its resume state and raise
    :class:`~routing_rl.training.interrupt.Interrupted`. Writes TensorBoard/CSV logs,
    checkpoints, ``best_model.zip`` (best validation return) and ``model.zip`` into
    ``run_dir``. The envs' rewards charge ``k_cpt × cost`` (None: the nodes' MACs).
    ``figures``: a validation entry -> ``{tag: figure}`` logged at every validation
    (:class:`~routing_rl.agents.sb3_callbacks.Validation`), the last one at the last iteration.
    ``splits``: the (training, validation) parts :func:`~routing_rl.training.splits.training_splits`
    made of the task's dataset for ``config`` already (a run's, so that they are not copied twice);
    None: made here.
    """
    env_id = config.env if isinstance(task, RoutingTask) else None  # a dataset in memory has no id to rebuild from
    task = task if isinstance(task, RoutingTask) else ImageTask(task)
    config.validate(task.all_archs(), task.static_archs())
    if config.agent not in SB3_AGENTS:
        raise ValueError(f"train_sb3 trains {', '.join(SB3_AGENTS)}, not {config.agent!r}")
    run_dir = Path(run_dir)
    manual_seed(config.seed)
    train_part, validation = splits if splits is not None else training_splits(config, task.dataset())[:2]
    options = config.options
    n_envs = options.n_envs
    # the agent reads k_cpt, not the routers; with exit_confidence its observations carry each exit's confidence
    net = task.make_net(config.arch, config.width, seed=config.seed, device=device, exit_confidence=config.exit_confidence)
    env_kwargs = dict(task=task, net=net, k_cpt=config.k_cpt, error_cost=config.error_cost, clip_actions=True,
                      cost=cost)
    joint = JointTraining.from_config(config)
    env = VecMonitor(RoutingSB3VecEnv(n_envs, seed=config.seed, split=train_part, train=True, joint=joint, **env_kwargs))
    env.unwrapped.traffic.record_side_exits = config.agent == "dqn" and options.side_heads
    eval_env = VecMonitor(RoutingSB3VecEnv(min(n_envs, len(validation)), seed=config.seed + 1, split=validation,
                                           train=False, **env_kwargs))
    kwargs = sb3_kwargs(config, n_envs)
    routing = {"agent": config.agent, "env": env_id, "dataset": config.dataset, "arch": config.arch,
               "width": config.width, "classes": len(task.classes), "k_cpt": config.k_cpt,
               "exit_confidence": config.exit_confidence, "k_cpt_unit": K_CPT_UNIT,
               "joint": dataclasses.asdict(joint), "sb3": kwargs, "n_envs": n_envs}

    history_path = run_dir / HISTORY_FILE
    trainer = env.unwrapped.trainer
    trainer.limit = config.iterations
    loaded_from = None
    if resume:
        model, loaded_from = load_newest(run_dir, env, device, routing)
        history = json.loads(history_path.read_text()) if history_path.is_file() else []
        history = [entry for entry in history if entry["iteration"] <= trainer.updates]
    else:
        # a copy: SB3 adds objects to policy_kwargs (A2C its optimiser class), routing stays plain JSON
        model = ALGORITHMS[config.agent]("MlpPolicy", env, routed_net=net, feature_trainer=trainer,
                                         routing=routing, seed=config.seed, device=device, **copy.deepcopy(kwargs))
        history = []
    model.iterations = config.iterations
    model.set_logger(IterationLogger(str(run_dir), lambda: trainer.updates, trainer.updates if resume else None))

    k_cpts = eval_values(config.k_cpt)
    progress = Progress(config.iterations, trainer.updates, f"{config.agent} {config.arch}")
    validation_callback = Validation(net, validation, k_cpts, lambda k_cpt: sb3_decide(model, net, k_cpt),
                                     history_path, lambda: trainer.updates, history, task, progress, figures,
                                     lambda images: sb3_scores(model, net, images, k_cpts[0]))
    evaluation = RunEvaluation(eval_env, run_dir / EVALUATIONS_FILE, model.num_timesteps if resume else None,
                               n_eval_episodes=min(len(validation), 500), eval_freq=1, best_model_save_path=str(run_dir),
                               callback_after_eval=validation_callback, verbose=0)
    callback = CallbackList([
        TrainingCharts(trainer),
        ProgressCallback(trainer, progress),
        EveryIterations(trainer, config.eval_every, evaluation),
        EveryIterations(trainer, config.checkpoint_every,
                        IterationCheckpoint(trainer, str(run_dir / CHECKPOINTS), config.agent)),
        *callbacks,
        ImageBudget(trainer, config.iterations),
        stop := StopBetweenSteps(trainer),
    ])
    if loaded_from is not None:
        restore_resume_state(loaded_from, model, eval_env, evaluation)
    # ImageBudget ends learn() when the images are spent, before this bound
    bound = step_bound((config.iterations - trainer.updates) * config.batch_size, n_envs, len(net.junctions))
    with stop_between_steps():  # a signal while the checkpoint is written waits for both its files
        try:
            if trainer.updates < config.iterations:
                log_interval = n_envs if config.agent == "dqn" else 1  # DQN counts episodes, PPO/A2C rollouts
                model.learn(bound, callback=callback, log_interval=log_interval, reset_num_timesteps=not resume)
            if stop_requested():  # during the rollout that spent the budget: stopped all the same, as the learners do
                raise Interrupted(stop_requested(), trainer.updates)
            done = validation_callback.history
            if trainer.updates and (not done or done[-1]["iteration"] < trainer.updates):  # judged at the last iteration too
                validation_callback.init_callback(model)
                validation_callback.on_step()
        except Interrupted:  # at a clean point: the zip and what it needs to continue exactly
            path = run_dir / CHECKPOINTS / f"{config.agent}_{trainer.updates}_iterations.zip"
            save_resume_state(path, model, eval_env, evaluation)
            model.save(path)
            raise
        except (ValueError, RuntimeError):  # SB3 meets NaN observations (e.g. in its Categorical) first
            if validation.frames > 1 or not features_diverged(net, validation.images[:PROBE_EXAMPLES].to(device)):
                raise
            raise NonFiniteLossError(diverged(f"the feature network's outputs grew past ±{DESCRIPTOR_BOUND:g} (the "
                                              "observation bound) or became non-finite", trainer.updates, trainer.lr(),
                                              "the checkpoints in checkpoints/ are kept")) from None
        finally:
            stop.close()
            progress.close()
            model.logger.close()
    model.save(run_dir / MODEL_FILE)
    return SB3Result(model, net, validation_callback.history, k_cpts, task.classes, task.sources, task)


def trained_net(run_dir: Path, device: str | torch.device = "cpu") -> RoutedNet:
    """The net of a finished run in ``run_dir`` (its ``model.zip``); RunError before it has finished."""
    if not (Path(run_dir) / MODEL_FILE).is_file():
        raise RunError(f"{run_dir} has no {MODEL_FILE}: the run has not finished")
    return load_sb3(Path(run_dir) / MODEL_FILE, device=device)[1]


def memory_sizes(config: TrainConfig) -> str:
    """The settings that size an SB3 agent's memory, as an out-of-memory line names them."""
    options = config.options
    return (f"--n-envs (now {options.n_envs}), --width (now {config.width}) or the sizes in --sb3-kwargs "
            f"(buffer_size, batch_size, n_steps, policy_kwargs' net_arch; now {json.dumps(options.sb3_kwargs)})")


@dataclass
class SB3Options(LearnerOptions):
    """The SB3 agents' options: the env's joint training at ``JOINT_LR`` (every head learns on
    every image), on the full tree or the agent's paths (``joint_execution``), every head's
    weight beside the reached one's 1 (``uniform_weight``); ``n_envs`` examples in flight in
    the vector env; ``sb3_kwargs`` over the settings :func:`sb3_kwargs` chooses for routing.
    ``algorithm``: the SB3 class whose keyword arguments ``sb3_kwargs`` are."""

    algorithm: ClassVar[str]
    lr: float | None = JOINT_LR
    joint_execution: str = JointTraining.execution
    uniform_weight: float = JointTraining.uniform_weight
    n_envs: int = 256
    sb3_kwargs: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.joint_execution not in EXECUTIONS:
            raise ValueError(f"unknown joint_execution {self.joint_execution!r}; choose one of {', '.join(EXECUTIONS)}")
        if self.sb3_kwargs:
            self._check_sb3_kwargs()

    def _check_sb3_kwargs(self) -> None:
        """Names against the algorithm's signature, the ones the run sets itself
        (:data:`SB3_RESERVED`), then types and ranges of the common ones (:data:`SB3_RANGES`):
        SB3 trains on ``batch_size`` 0 or ``gamma`` NaN without a word. What SB3 does check,
        it checks when the model is built: :func:`check_sb3_kwargs` builds one before the run starts."""
        import inspect

        algorithm = SB3_CLASSES[self.algorithm]
        accepted = set(inspect.signature(algorithm.__init__).parameters) - {"self", "policy", "env"}
        unknown = sorted(set(self.sb3_kwargs) - accepted)
        if unknown:
            raise ValueError(f"{self.algorithm.upper()} takes no keyword argument {', '.join(unknown)}; "
                             f"choose among {', '.join(sorted(accepted - set(SB3_RESERVED)))}")
        for name, value in self.sb3_kwargs.items():
            where = f"--sb3-kwargs {name}"
            if name in SB3_RESERVED:
                raise ValueError(f"{where}: {SB3_RESERVED[name]}")
            if value is None and name in SB3_NULLABLE:
                continue
            if name in SB3_FLAGS and not isinstance(value, bool):
                raise ValueError(f"{where} must be true or false, got {value!r}")
            if name in SB3_OBJECTS and not isinstance(value, dict):
                raise ValueError(f"{where} must be a JSON object" + (" or null" if name in SB3_NULLABLE else "")
                                 + f", got {value!r}")
            if name in SB3_RANGES and not (name == "train_freq" and isinstance(value, list)):  # [n, "step"]: SB3 checks
                number = int if name in SB3_INTEGERS else (int, float)
                if isinstance(value, bool) or not isinstance(value, number):
                    raise ValueError(f"{where} must be {KIND_NAMES[int] if name in SB3_INTEGERS else KIND_NAMES[float]}, "
                                     f"got {value!r}")
                check_range(where, value, SB3_RANGES[name])
                if name == "gradient_steps" and value == 0:
                    raise ValueError(f"{where} must be {SB3_RANGES[name][2]}, got 0")


@dataclass
class DQNOptions(SB3Options):
    """DQN's: ε falls to 0.1 (its final rate), double Q-learning's targets (this module's
    docstring says why), and the side exits replayed (``side_heads``)."""

    algorithm: ClassVar[str] = "dqn"
    epsilon: float | None = 0.1
    double_q: bool | None = True
    side_heads: bool = True


@dataclass
class PPOOptions(SB3Options):
    algorithm: ClassVar[str] = "ppo"


@dataclass
class A2COptions(SB3Options):
    algorithm: ClassVar[str] = "a2c"


SB3_TRAINING = EnvTraining(train=train_sb3, load=trained_net, has_checkpoint=lambda run_dir: latest_checkpoint(run_dir) is not None,
                           check=check_sb3_kwargs, check_fits=check_sb3_fits, sizes=memory_sizes)
for _options, _policy in ((DQNOptions, "eps-greedy"), (PPOOptions, "softmax"), (A2COptions, "softmax")):
    register_learner(LearnerSpec(_options.algorithm, _options, policies=(_policy,), env_training=SB3_TRAINING,
                                 max_seed=SB3_MAX_SEED, reads=("error_cost",)))  # a 0/1 error is only a reward to them
