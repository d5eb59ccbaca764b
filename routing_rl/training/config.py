"""Typed training configuration and its presets.

One :class:`TrainConfig` describes a run completely; it is saved beside the run as
``config.json`` and every field is a command-line flag of ``experiments/train_agent.py``
(``k_cpt`` → ``--k-cpt``). A preset fills the schedule-related fields; any field given
explicitly wins over the preset. The fields a learner leaves at None take its defaults, which
its module declares with its name, policies and refusals
(:class:`~routing_rl.training.learners.LearnerSpec`); ``options`` is that learner's view.

Presets:
  * ``paper`` — the paper's schedule: 80,000 iterations of batch 128; lr 0.1, τ and ε
    halving every 10,000 iterations.
  * ``cpu-small`` — the same shape compressed 20× in time (4,000 iterations, every
    half-life 500), so that one 8-column net trains in minutes on a 2-core CPU.
  * ``quick`` — the default: 1,200 iterations; lr and τ halving every 400 and ε every 150, so
    that the policies harden within the run; a first real result in a few minutes on a CPU.
    τ halves with the learning rate, as in the paper: a policy that hardens while the columns
    still learn at full rate commits on the heads' early ranking, which the seed decides
    (docs/suite.md, "Both schedules over three seeds on all sixteen cells").
  * ``smoke`` — a few iterations on a small batch and a few hundred examples, for tests.

A preset is a number of training images, ``iterations × batch_size``, the same for every
agent: the paper's learners take one optimiser step per batch; the SB3 agents (dqn, ppo,
a2c) stop when the env's feature network has taken ``iterations`` steps of ``batch_size``
finished episodes, however many environment steps the episodes took. Their own settings
(replay buffer, learning starts, target updates, exploration schedule, rollout lengths) are
chosen for routing and scale with that budget: :func:`routing_rl.agents.sb3.sb3_kwargs`
documents them; ``--n-envs`` and ``--sb3-kwargs`` change them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from routing_rl.core.costs import ERROR_COSTS
from routing_rl.core.files import atomic_write_text
from routing_rl.core.k_cpt import COSTS, DYNAMIC, check_k_cpt
from routing_rl.data.containers import VALIDATION_MIXES
from routing_rl.nets.multiscale import arch_names
from routing_rl.training.learners import JOINT_LR, LR  # noqa: F401 (sgd, envs and tests import them from here)
from routing_rl.training.learners import LearnerOptions, LearnerSpec, canonical_name, learner_spec

AGENTS = ("static", "actor", "pragmatic-critic", "optimistic-critic", "threshold", "dqn", "ppo", "a2c")
"""The package's learners, in the order reports list them; each declares itself in its module
(:mod:`routing_rl.training.learners`), and a learner of another package is ``--agent module:name``."""
AGENT_ALIASES = {"critic": "pragmatic-critic"}
"""Other names an agent answers to; a config stores the agent's own name."""
POLICIES = ("softmax", "eps-greedy", "greedy")
EXECUTIONS = ("full", "sampled")
"""``execution``: how a learner that samples paths trains (the critics); ``joint_execution``:
how the routing env trains the features under a learner that trains through it (the SB3 agents)."""
SCORE_STARTS = ("guess", "zero")
PRESETS = ("smoke", "quick", "cpu-small", "paper")
DEFAULT_PRESET = "quick"
SB3_AGENTS = ("dqn", "ppo", "a2c")
RESOLVED_FIELDS = tuple(f.name for f in dataclasses.fields(LearnerOptions))
"""Fields whose default (None) is the learner's (:class:`~routing_rl.training.learners.LearnerOptions`):
each has a ``resolved_<field>`` property."""
RESUME_OVERRIDES = ("device", "data_dir", "download", "channels_last", "compile")
"""Settings of the machine, not of the experiment: the only ones a resumed run may change."""

PRESET_VALUES: dict[str, dict] = {
    "paper": dict(iterations=80_000, batch_size=128, lr_half_life=10_000, tau_half_life=10_000,
                  epsilon_half_life=10_000, eval_every=5_000, checkpoint_every=5_000),
    "cpu-small": dict(iterations=4_000, batch_size=128, lr_half_life=500, tau_half_life=500,
                      epsilon_half_life=500, eval_every=250, checkpoint_every=500),
    "quick": dict(iterations=1_200, batch_size=128, lr_half_life=400, tau_half_life=400,
                  epsilon_half_life=150, eval_every=400, checkpoint_every=400),
    "smoke": dict(iterations=20, batch_size=16, lr_half_life=10, tau_half_life=10,
                  epsilon_half_life=10, eval_every=10, checkpoint_every=10, eval_examples=64,
                  train_examples=256),
}


RUN_NAME_HINT = "one folder name: not empty, '.' or '..', without / or \\"
NAME_BYTES = 255
"""The longest file name (in UTF-8 bytes) common filesystems allow (ext4, XFS, APFS, NTFS)."""
MAX_SEED = 2**63 - 1
"""The largest seed (an int64); every generator is seeded from all of its bits (:mod:`routing_rl.core.seeds`)."""
SB3_MAX_SEED = 2**32 - 2
"""SB3 seeds NumPy's legacy generator (32-bit seeds), the eval env with ``seed + 1``."""
FLOAT32_MAX = 3.4028234663852886e38
"""The weights are float32: SGD cannot apply a step size beyond this (it overflows inside
``SGD.step``), so ``lr`` is refused above it; below it, a too-large ``lr`` is caught by the NaN guard."""
KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a JSON object"}
_POSITIVE = ((0, False), (math.inf, False), "a finite number > 0")
_NON_NEGATIVE = ((0, True), (math.inf, False), "a finite number >= 0")
_COUNT = ((1, True), (math.inf, False), "a positive integer")
RANGES = {  # field: ((low, inclusive), (high, inclusive), what to say)
    "width": _COUNT, "n_envs": _COUNT, "iterations": _COUNT, "batch_size": _COUNT, "eval_every": _COUNT, "checkpoint_every": _COUNT,
    "eval_examples": _COUNT, "train_examples": _COUNT, "seed": ((0, True), (MAX_SEED, True), "an integer in 0 ... 2**63 - 1"),
    "lr": _POSITIVE, "lr_half_life": _POSITIVE, "tau": _POSITIVE, "tau_half_life": _POSITIVE,
    "epsilon_half_life": _POSITIVE, "router_lr_scale": _POSITIVE, "k_dec": _NON_NEGATIVE, "k_ure": _NON_NEGATIVE, "k_l2": _NON_NEGATIVE,
    "momentum": ((0, True), (1, False), "in [0, 1)"),
    "epsilon": ((0, True), (1, True), "in [0, 1]"),
    "uniform_weight": ((0, True), (1, True), "in [0, 1] (1: every head weighs the same, 0: only the head the agent reached)"),
    "head_weight": _NON_NEGATIVE,
    "probability_floor": ((0, False), (1, False), "in (0, 1), so that no path has zero probability"),
    "validation_fraction": ((0, False), (1, False), "in (0, 1)"),
}
_SHARE = ((0, True), (1, True), "in [0, 1]")
SB3_RANGES = {  # SB3 keyword argument: range, as RANGES; SB3 accepts some of these out of range and trains on
    "learning_rate": _POSITIVE, "gamma": _SHARE, "gae_lambda": _SHARE, "ent_coef": _NON_NEGATIVE,
    "vf_coef": _NON_NEGATIVE, "max_grad_norm": _POSITIVE, "clip_range": _POSITIVE, "clip_range_vf": _POSITIVE,
    "target_kl": _POSITIVE, "rms_prop_eps": _POSITIVE, "tau": ((0, False), (1, True), "in (0, 1]"),
    "exploration_fraction": _SHARE, "exploration_initial_eps": _SHARE, "exploration_final_eps": _SHARE,
    "batch_size": _COUNT, "buffer_size": _COUNT, "n_steps": _COUNT, "n_epochs": _COUNT, "target_update_interval": _COUNT,
    "stats_window_size": _COUNT, "train_freq": _COUNT, "learning_starts": ((0, True), (math.inf, False), "an integer >= 0"),
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


def check_range(name: str, value, spec: tuple) -> None:
    """Raise ValueError unless the number ``value`` lies in ``spec`` (an entry of :data:`RANGES`)."""
    (low, low_in), (high, high_in), hint = spec
    above = value >= low if low_in else value > low
    below = value <= high if high_in else value < high
    if not ((isinstance(value, int) or math.isfinite(value)) and above and below):
        raise ValueError(f"{name} must be {hint}, got {value!r}")
    if name.endswith(("lr", "learning_rate")) and value > FLOAT32_MAX:
        raise ValueError(f"{name} must be at most {FLOAT32_MAX:.3g} (the weights are float32), got {value!r}")


def check_run_name(name: str | None) -> None:
    """A run name is one path component: never ``.``, ``..``, empty, absolute or nested, so
    that the run directory always lies directly inside the logdir."""
    if name is None:
        return
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if name in ("", ".", "..") or any(sep in name for sep in separators) or "\0" in name or name != name.strip():
        raise ValueError(f"run_name must be {RUN_NAME_HINT}, got {name!r}")
    if len(name.encode()) > NAME_BYTES:
        raise ValueError(f"run_name must be at most {NAME_BYTES} bytes (a file name's limit), got {len(name.encode())}: "
                         "choose a shorter --run-name")


@dataclass
class TrainConfig:
    """Everything that defines a training run. Units: an iteration is one optimiser step on
    ``batch_size`` training images for every agent (for SB3 agents, one step of the env's
    feature network on ``batch_size`` finished episodes), so a budget of ``iterations``
    means ``iterations × batch_size`` images everywhere; k_cpt is a cost per MAC."""

    agent: str = "actor"  # a registered learner (routing_rl.training.learners), or "module:name"
    policy: str | None = None  # None: the agent's default (the first of its LearnerSpec.policies)
    env: str = "routing_rl/HybridRouting-v0"  # a registered routing task's id, or "module:id"
    dataset: str | None = None  # None: the env's dataset
    arch: str | None = None  # None: the task's default (static-8 for the static agent, chain for the others)
    width: int = 1
    k_cpt: float | str = 4e-9  # a cost per MAC, or "dynamic" (sampled from K_CPT_VALUES)
    cost: str = "macs"  # what c_cpt charges: "macs", or "latency" (measured, in MAC-equivalents)
    latency_batch: int | None = None  # batch size the latency is profiled at; None: batch_size
    latency_profile: str | None = None  # a profile JSON measured on the inference device; None: profile here
    preset: str = DEFAULT_PRESET
    iterations: int = 4_000
    batch_size: int = 128
    lr: float | None = None  # None: LR (0.1), or JOINT_LR (0.02) where every head learns on every image (SB3, c_heads)
    lr_half_life: int = 500
    momentum: float = 0.9
    tau: float | None = None  # None: 1.0 for the actor, 0.1 for critics
    tau_half_life: int = 500
    epsilon: float | None = None  # None: 1.0 for critics (annealed), 0.1 for DQN (its final ε)
    epsilon_half_life: int = 500
    k_dec: float = 0.01
    k_ure: float = 0.001
    router_lr_scale: float | None = None  # the routers step at lr × this; None: CRITIC_ROUTER_LR_SCALE for critics that
    # train every head on every image (head_weight > 0), 1 otherwise (agents/critic.py says why)
    score_start: str = "zero"  # critics: the paper's zero scores, or "guess": minus a uniform guess's error cost
    k_l2: float = 1e-4
    c_mod_routing: bool = False  # actor: c_mod's gradient also reaches the routers (the paper's "regularizing d̂")
    talr: bool = True
    channels_last: bool = False  # convolutions in NHWC memory format (faster on CPUs)
    compile: bool = False  # torch.compile of the full evaluation
    execution: str = "full"  # critics: every node on every image (agents/critic.py says why); "sampled": the decisions' paths only
    joint_execution: str = "full"  # dqn/ppo/a2c: the env trains the features on every head ("full") or the agent's paths
    exit_confidence: bool = False  # routers also read their exit heads' top softmax probability
    side_heads: bool = True  # sampled critics: train every head whose input the path computed; dqn: replay those exits
    double_q: bool | None = None  # dqn: the online net picks the next junction's sink, the target net values it (double
    # Q-learning); None: True for dqn (agents/sb3.py says why)
    uniform_weight: float = 1.0  # dqn/ppo/a2c full-tree joint training: every head's weight beside the reached one's 1
    head_weight: float | None = None  # every head's cross-entropy on every image, times this, beside c_err; None: 1 for
    # critics on the full tree, 0 for the actor and sampled critics (agents/critic.py says why)
    error_cost: str = "cross_entropy"
    utility_error: str | None = None  # c_err inside critic utilities; None: zero_one (the paper's 0/1 variant) for
    # critics that train every head on every image (head_weight > 0), cross_entropy otherwise (agents/critic.py says why)
    probability_floor: float = 1e-6
    validation_fraction: float = 0.1
    validation_mix: str = "test"  # the validation part's composition: the test split's ("test") or the training split's
    eval_every: int = 250
    eval_examples: int | None = None  # None: the whole validation/test split
    train_examples: int | None = None  # None: the whole training split
    checkpoint_every: int = 500
    seed: int = 0
    device: str = "auto"
    data_dir: str | None = None
    download: bool = True  # False: never try torchvision's downloaders
    logdir: str = "runs"
    run_name: str | None = None
    n_envs: int = 256  # SB3 agents: examples in flight in the vector env
    sb3_kwargs: dict = field(default_factory=dict)  # SB3 agents: keyword arguments over agents.sb3.sb3_kwargs
    learner_options: dict = field(default_factory=dict)  # the learner's options that are not fields here, by name

    def __post_init__(self) -> None:
        self.agent = canonical_name(self.agent)

    @property
    def spec(self) -> LearnerSpec:
        return learner_spec(self.agent)

    @property
    def options(self) -> LearnerOptions:
        """The learner's options as this run sets them: a field of the same name here (None:
        the learner's default), else ``learner_options``."""
        own = {f.name for f in dataclasses.fields(self)} - {"learner_options"}
        values = {f.name: getattr(self, f.name) if f.name in own else self.learner_options.get(f.name)
                  for f in dataclasses.fields(self.spec.options)}
        options = self.spec.options(**{name: value for name, value in values.items() if value is not None})
        if options.policy is None and self.spec.policies:
            options.policy = self.spec.policies[0]
        return options

    @property
    def dynamic_k_cpt(self) -> bool:
        return self.k_cpt == DYNAMIC

    def resolved_values(self) -> dict:
        """Every field, the defaults that depend on the agent (None in ``config.json``) as they
        resolve, and the learner's own options: what the run trains with."""
        values = dataclasses.asdict(self)
        options = dataclasses.asdict(self.options)
        values.update({name: options[name] for name in RESOLVED_FIELDS})
        own = {name: value for name, value in options.items() if name not in values}
        del values["learner_options"]  # a learner's own options stand beside the common fields, as flags do
        return {**values, **own}

    def __getattr__(self, name: str):
        """``resolved_<field>``: the field as the run trains with it (None: the learner's default)."""
        if name.startswith("resolved_") and name[len("resolved_"):] in RESOLVED_FIELDS:
            return getattr(self.options, name[len("resolved_"):])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def check_error_cost(self) -> None:
        """Refuse an ``error_cost`` this agent cannot learn from (its LearnerSpec refuses it:
        heads that learn c_err get no gradient from a 0/1 error)."""
        self._check_refusals(("error_cost",))

    def _check_refusals(self, names) -> None:
        """Each of ``names`` the learner refuses (``LearnerSpec.refusals``): only its default, or no value, passes."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in names:
            value = getattr(self, name)
            refusals = self.spec.refusals
            if name in refusals and value and value != defaults[name]:
                raise ValueError(refusals[name].format(agent=self.agent, value=value))

    def validate(self, archs: Sequence[str] | None = None, static_archs: Sequence[str] | None = None) -> TrainConfig:
        """Raise ValueError naming the first bad field and how to fix it (also for a config
        read back from a hand-edited config.json: every field's type and range is checked).

        ``archs``: every net the env's task builds (default: the paper's multiscale nets);
        ``static_archs``: those of them without junctions, which the static agent and only
        it trains (default: the paper's ``static-N``; for a task's archs, unchecked here: its
        learner refuses a net it cannot train).
        """
        if not isinstance(self.sb3_kwargs, dict):
            raise ValueError(f"sb3_kwargs must be a JSON object of SB3 keyword arguments, got {self.sb3_kwargs!r}")
        self._check_types()
        learner = self.spec
        allowed = learner.policies
        if self.policy is not None and self.policy not in allowed:
            if self.policy not in POLICIES:
                raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
            can = f"can only use {', '.join(allowed)}" if allowed else "has no training routing policy"
            raise ValueError(f"agent {self.agent!r} {can}; drop --policy or pick another agent")
        paper = archs is None
        archs = arch_names() if archs is None else list(archs)
        static = [a for a in archs if a.startswith("static-")] if static_archs is None else list(static_archs)
        routed = [a for a in archs if a not in static]
        known_static = paper or static_archs is not None  # otherwise the learner checks the net it is given
        if self.arch is None:
            if not paper:
                raise ValueError("no arch given; choose one of the task's: " + ", ".join(archs))
            self.arch = "static-8" if learner.nets == "static" else "chain"
        if self.arch not in archs:
            raise ValueError(f"unknown arch {self.arch!r}; choose one of {', '.join(archs)}")
        if known_static and learner.nets == "static" and self.arch not in static:
            if not static:
                raise ValueError("the static agent trains nets without junctions, and this task has none; pick another agent")
            paper_static = [a for a in arch_names() if a.startswith("static-")]
            choices = "static-N (N = 1..8)" if static == paper_static else ", ".join(static)
            raise ValueError(f"the static agent trains nets without junctions, got --arch {self.arch}; "
                             f"use one of {choices}")
        if known_static and learner.nets != "static" and self.arch in static:
            raise ValueError(f"agent {self.agent!r} needs junctions to route at, got --arch {self.arch}; "
                             f"use {' or '.join(routed)}, or --agent static")
        if self.arch in arch_names() and learner.nets == "chain" and self.arch != "chain":
            raise ValueError(f"threshold early exit puts a head on every column of a chain, got --arch {self.arch}; use --arch chain")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        self.k_cpt = check_k_cpt(self.k_cpt)
        if self.cost not in COSTS:
            raise ValueError(f"unknown cost {self.cost!r}; choose one of {', '.join(COSTS)}")
        if self.latency_batch is not None and (isinstance(self.latency_batch, bool) or not isinstance(self.latency_batch, int)
                                               or self.latency_batch < 1):
            raise ValueError(f"latency_batch must be a positive integer, got {self.latency_batch!r}")
        if self.cost != "latency" and (self.latency_batch is not None or self.latency_profile is not None):
            raise ValueError("--latency-batch and --latency-profile belong to the latency cost; add --cost latency")
        if self.compile and learner.trains_through_env:
            raise ValueError(f"--compile speeds up the gradient learners' steps; {self.agent} trains through SB3, drop --compile")
        if self.exit_confidence and not learner.routers:
            raise ValueError(f"--exit-confidence is read by routers and by the SB3 agents' observations; "
                             f"{self.agent!r} has neither: drop it")
        if self.dynamic_k_cpt and not learner.routers:
            raise ValueError(f"agent {self.agent!r} has no routers to read k_cpt; use a fixed --k-cpt")
        for name, value in (("execution", self.execution), ("joint_execution", self.joint_execution)):
            if value not in EXECUTIONS:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(EXECUTIONS)}")
        if self.execution not in learner.executions:
            env = " (how the env trains the features under it: --joint-execution)" if learner.trains_through_env else ""
            raise ValueError(learner.refusals.get("execution", "--execution {value} chooses how a critic trains; {agent!r} "
                                              "does not read it: drop it" + env).format(agent=self.agent, value=self.execution))
        if self.joint_execution != "full" and not learner.trains_through_env:
            raise ValueError(f"--joint-execution chooses how the routing env trains the features under dqn, ppo and a2c; "
                             f"{self.agent!r} does not train through the env: drop it")
        unknown = sorted(set(self.learner_options) - {f.name for f in dataclasses.fields(learner.options)})
        if unknown:
            raise ValueError(f"agent {self.agent!r} has no option {', '.join(unknown)}; drop it from learner_options")
        options = self.options  # a learner's options check themselves when built
        self._check_types(options)
        for name, value in (("error_cost", self.error_cost), ("utility_error", options.utility_error)):
            if value not in ERROR_COSTS:
                raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(ERROR_COSTS)}")
        self._check_refusals(("double_q", "head_weight", "error_cost", "c_mod_routing", "sb3_kwargs"))
        if self.validation_mix not in VALIDATION_MIXES:
            raise ValueError(f"unknown validation_mix {self.validation_mix!r}; choose one of {', '.join(VALIDATION_MIXES)}")
        if self.score_start not in SCORE_STARTS:
            raise ValueError(f"unknown score_start {self.score_start!r}; choose one of {', '.join(SCORE_STARTS)}")
        if self.sb3_kwargs:
            self._check_sb3_kwargs()
        for name, spec in RANGES.items():
            if getattr(self, name) is not None:
                check_range(name, getattr(self, name), spec)
        if learner.max_seed is not None and self.seed > learner.max_seed:
            raise ValueError(f"seed must be at most {learner.max_seed} for {self.agent} (SB3 seeds NumPy with 32 bits), "
                             f"got {self.seed}")
        check_run_name(self.run_name)
        return self

    def _check_types(self, values=None) -> None:
        """Every field of ``values`` (default: this config; also the learner's options) holds a
        value of its annotated type (an int where a float is asked)."""
        values = self if values is None else values
        for name, hint in typing.get_type_hints(type(values)).items():
            kinds = typing.get_args(hint) or (hint,)
            value = getattr(values, name)
            if value is None and type(None) in kinds:
                continue
            kinds = tuple(typing.get_origin(k) or k for k in kinds if k is not type(None))
            accepted = kinds + ((int,) if float in kinds else ())
            if isinstance(value, bool) != (bool in kinds) or not isinstance(value, accepted):
                expected = " or ".join(KIND_NAMES.get(k, f"a {k.__name__}") for k in kinds)
                raise ValueError(f"{name} must be {expected}" + (" or null" if type(None) in typing.get_args(hint) else "")
                                 + f", got {value!r}")

    def _check_sb3_kwargs(self) -> None:
        """Names against the algorithm's signature, the ones the run sets itself
        (:data:`SB3_RESERVED`), then types and ranges of the common ones (:data:`SB3_RANGES`):
        SB3 trains on ``batch_size`` 0 or ``gamma`` NaN without a word. What SB3 does check,
        it checks when the model is built: :func:`routing_rl.agents.sb3.check_sb3_kwargs`
        builds one before the run starts."""
        import inspect

        import stable_baselines3

        algorithm = getattr(stable_baselines3, self.agent.upper())
        accepted = set(inspect.signature(algorithm.__init__).parameters) - {"self", "policy", "env"}
        unknown = sorted(set(self.sb3_kwargs) - accepted)
        if unknown:
            raise ValueError(f"{self.agent.upper()} takes no keyword argument {', '.join(unknown)}; "
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

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        values = json.loads(text)
        if values.pop("extra", {}):  # earlier configs: SB3 settings, now n_envs and sb3_kwargs, counted env steps
            raise ValueError("this config was written before --n-envs and --sb3-kwargs, when SB3 iterations were "
                             "environment steps; start a new run")
        values.setdefault("validation_mix", "train")  # configs written before it held out the training mix
        values.setdefault("head_weight", 0.0)  # configs written before it trained heads by their routed share alone
        values.setdefault("double_q", False)  # configs written before it: DQN's one-step max targets
        if values.get("execution") is None:  # written when None meant the agent's default execution, which was
            sampled = "router_lr_scale" not in values and not _trains_through_env(values.get("agent")) and \
                values.get("policy") in ("eps-greedy", "greedy")  # sampled for these policies, before the task suite
            values["execution"] = "sampled" if sampled else "full"
        values = before_joint_execution(values)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"config has unknown fields {sorted(unknown)}; was it written by another version?")
        return cls(**values)

    def save(self, path: Path) -> None:
        atomic_write_text(Path(path), self.to_json())


def before_joint_execution(values: dict) -> dict:
    """``values`` (a config.json, or the settings a checkpoint recorded) written before
    ``joint_execution``, when ``execution`` also chose how the env trained the features under
    a learner that trains through it: that choice moved to ``joint_execution``."""
    if "joint_execution" in values or values.get("execution") is None or not _trains_through_env(values.get("agent")):
        return values
    return {**values, "joint_execution": values["execution"], "execution": "full"}


def _trains_through_env(agent) -> bool:
    try:
        return isinstance(agent, str) and learner_spec(agent).trains_through_env
    except ValueError:
        return False  # validate names the unknown agent


def make_config(preset: str = DEFAULT_PRESET, archs: Sequence[str] | None = None,
                static_archs: Sequence[str] | None = None, **overrides) -> TrainConfig:
    """A validated config: the preset's values, then ``overrides`` (fields set to None are
    treated as not given); ``archs``, ``static_archs``: the nets the env's task offers (see
    :meth:`TrainConfig.validate`)."""
    if preset not in PRESET_VALUES:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}")
    values = {**PRESET_VALUES[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return TrainConfig(preset=preset, **values).validate(archs, static_archs)
