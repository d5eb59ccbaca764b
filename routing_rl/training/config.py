"""Typed training configuration and its presets.

One :class:`TrainConfig` describes a run completely; it is saved beside the run as
``config.json``. Its fields are what every run shares (data, schedule, k_cpt, cost, evaluation,
checkpoints, seed, device, run folder); the learner's options (τ, the critics' execution, the
SB3 agents' settings...) nest under ``learner_options``, declared with their defaults by the
learner's module (:class:`~routing_rl.training.learners.LearnerSpec`), and ``options`` gives
them typed with every default filled in. Every field and option is a command-line flag of
``experiments/train_agent.py`` (``k_cpt`` → ``--k-cpt``). A preset fills the schedule (an
option's half-life too, for a learner that has it); any value given explicitly wins.

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
from routing_rl.training.acceleration import PRECISIONS
from routing_rl.training.learners import JOINT_LR, LR  # noqa: F401 (sgd, envs and tests import them from here)
from routing_rl.training.learners import (LearnerOptions, LearnerSpec, canonical_name, declared_options, learner_spec,
                                          undeclared_option)

AGENTS = ("static", "actor", "pragmatic-critic", "optimistic-critic", "threshold", "dqn", "ppo", "a2c")
"""The package's learners, in the order reports list them; each declares itself in its module
(:mod:`routing_rl.training.learners`), and a learner of another package is ``--agent module:name``."""
POLICIES = ("softmax", "eps-greedy", "greedy")
EXECUTIONS = ("full", "sampled")
"""``execution``: how a learner that samples paths trains (the critics); ``joint_execution``:
how the routing env trains the features under a learner that trains through it (the SB3 agents)."""
PRESETS = ("smoke", "quick", "cpu-small", "paper")
DEFAULT_PRESET = "quick"
BEFORE_NESTING = {
    "policy": None, "tau": None, "tau_half_life": 500, "epsilon": None, "epsilon_half_life": 500, "k_dec": 0.01,
    "k_ure": 0.001, "router_lr_scale": None, "score_start": "zero", "c_mod_routing": False, "execution": "full",
    "joint_execution": "full", "side_heads": True, "double_q": None, "uniform_weight": 1.0, "head_weight": None,
    "utility_error": None, "n_envs": 256, "sb3_kwargs": {},
}
"""The learners' options that were fields of the config before they nested under
``learner_options``, with their defaults then: a config.json or checkpoint of then names them
at its top level (:func:`nested` moves them)."""
ARCHS_SHOWN = 16
"""Archs an unknown-arch error names (an image task has dozens of ResNet prefixes)."""
RESUME_OVERRIDES = ("device", "data_dir", "download", "channels_last", "compile", "cuda_graphs")
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
FLOAT32_MAX = 3.4028234663852886e38
"""The weights are float32: SGD cannot apply a step size beyond this (it overflows inside
``SGD.step``), so ``lr`` is refused above it; below it, a too-large ``lr`` is caught by the NaN guard."""
KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", dict: "a JSON object"}
POSITIVE = ((0, False), (math.inf, False), "a finite number > 0")
NON_NEGATIVE = ((0, True), (math.inf, False), "a finite number >= 0")
COUNT = ((1, True), (math.inf, False), "a positive integer")
RANGES = {  # field: ((low, inclusive), (high, inclusive), what to say)
    "width": COUNT, "n_envs": COUNT, "iterations": COUNT, "batch_size": COUNT, "eval_every": COUNT, "checkpoint_every": COUNT,
    "eval_examples": COUNT, "train_examples": COUNT, "seed": ((0, True), (MAX_SEED, True), "an integer in 0 ... 2**63 - 1"),
    "lr": POSITIVE, "lr_half_life": POSITIVE, "lr_warmup": ((0, True), (math.inf, False), "an integer >= 0"),
    "tau": POSITIVE, "tau_half_life": POSITIVE,
    "epsilon_half_life": POSITIVE, "router_lr_scale": POSITIVE, "k_dec": NON_NEGATIVE, "k_ure": NON_NEGATIVE, "k_l2": NON_NEGATIVE,
    "momentum": ((0, True), (1, False), "in [0, 1)"),
    "epsilon": ((0, True), (1, True), "in [0, 1]"),
    "uniform_weight": ((0, True), (1, True), "in [0, 1] (1: every head weighs the same, 0: only the head the agent reached)"),
    "head_weight": NON_NEGATIVE,
    "probability_floor": ((0, False), (1, False), "in (0, 1), so that no path has zero probability"),
    "validation_fraction": ((0, False), (1, False), "in (0, 1)"),
}
"""The range of every number a run is given, common field or learner's option, by its one name."""


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
    lr: float | None = None  # None: the learner's (LearnerOptions.lr): LR (0.1), or JOINT_LR (0.02) where every head
    # learns on every image (SB3, c_heads)
    lr_half_life: int = 500
    lr_warmup: int = 0  # iterations over which the learning rate rises linearly to its schedule (0: none, the paper's)
    momentum: float = 0.9
    k_l2: float = 1e-4
    talr: bool = True
    channels_last: bool = False  # convolutions in NHWC memory format (faster on CPUs)
    compile: bool = False  # torch.compile of the full evaluation
    cuda_graphs: bool = False  # CUDA only: the compiled full evaluation replays as CUDA graphs (implies compile)
    precision: str = "float32"  # training steps' arithmetic: float32, or bf16 autocast (acceleration.precision_context)
    exit_confidence: bool = False  # routers (and the env's observation) also read their exit heads' top softmax probability
    error_cost: str = "cross_entropy"
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
    learner_options: dict = field(default_factory=dict)  # the learner's options given, by name (left out: its default)

    def __post_init__(self) -> None:
        self.agent = canonical_name(self.agent)

    @property
    def spec(self) -> LearnerSpec:
        return learner_spec(self.agent)

    @property
    def options(self) -> LearnerOptions:
        """The learner's options as this run sets them, every default filled in: ``learner_options``,
        and a common field of the same name (``lr``) when it is given."""
        spec = self.spec
        names = spec.option_names()
        given = {name: value for name, value in self.learner_options.items() if name in names}
        given.update({name: getattr(self, name) for name in names & COMMON if getattr(self, name) is not None})
        options = spec.options(**{name: value for name, value in given.items() if value is not None})
        if options.policy is None and spec.policies:
            options.policy = spec.policies[0]
        return options

    @property
    def dynamic_k_cpt(self) -> bool:
        return self.k_cpt == DYNAMIC

    def resolved_values(self) -> dict:
        """Every common field and every option of the learner, as the run trains with them (the
        learner's defaults filled in): one flat dict, as the flags are."""
        values = {name: getattr(self, name) for name in COMMON}
        return {**values, **dataclasses.asdict(self.options)}

    def check_error_cost(self) -> None:
        """Refuse an ``error_cost`` this agent cannot learn from (its LearnerSpec refuses it:
        heads that learn c_err get no gradient from a 0/1 error)."""
        refusals = self.spec.refusals
        if "error_cost" in refusals and self.error_cost != ERROR_COST:
            raise ValueError(refusals["error_cost"].format(agent=self.agent, value=self.error_cost))

    def validate(self, archs: Sequence[str] | None = None, static_archs: Sequence[str] | None = None) -> TrainConfig:
        """Raise ValueError naming the first bad field and how to fix it (also for a config
        read back from a hand-edited config.json: every field's type and range is checked).

        ``archs``: every net the env's task builds (default: the paper's multiscale nets);
        ``static_archs``: those of them without junctions, which the static agent and only
        it trains (default: the paper's ``static-N``; for a task's archs, unchecked here: its
        learner refuses a net it cannot train).
        """
        if not isinstance(self.learner_options, dict):
            raise ValueError(f"learner_options must be a JSON object of the learner's options, got {self.learner_options!r}")
        _check_types(type(self), {name: getattr(self, name) for name in COMMON})
        learner = self.spec
        for name, value in self.learner_options.items():
            if value is not None and name not in learner.option_names():
                raise ValueError(undeclared_option(learner, name, value))
        _check_types(learner.options, self.learner_options)
        settings = self.resolved_values()  # a learner's options check themselves when built
        allowed, policy = learner.policies, self.learner_options.get("policy")
        if policy is not None and policy not in allowed:
            if policy not in POLICIES:
                raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
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
            names = (static if learner.nets == "static" else routed) or archs
            shown = ", ".join(names[:ARCHS_SHOWN]) + (f" and {len(names) - ARCHS_SHOWN} more (--help)" if len(names) > ARCHS_SHOWN else "")
            raise ValueError(f"unknown arch {self.arch!r}; choose one of {shown}")
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
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.precision != "float32" and learner.trains_through_env:
            raise ValueError(f"--precision bf16 runs the gradient learners' steps under autocast; {self.agent} trains "
                             "through the routing env, drop --precision")
        if self.compile and learner.trains_through_env:
            raise ValueError(f"--compile speeds up the gradient learners' steps; {self.agent} trains through the routing env, drop --compile")
        if self.cuda_graphs and learner.trains_through_env:
            raise ValueError(f"--cuda-graphs replays the gradient learners' steps; {self.agent} trains through the routing env, "
                             "drop --cuda-graphs")
        if self.exit_confidence and not learner.routers:
            raise ValueError(f"--exit-confidence is read by routers and by the SB3 agents' observations; "
                             f"{self.agent!r} has neither: drop it")
        if self.dynamic_k_cpt and not learner.routers:
            raise ValueError(f"agent {self.agent!r} has no routers to read k_cpt; use a fixed --k-cpt")
        if self.error_cost not in ERROR_COSTS:
            raise ValueError(f"unknown error_cost {self.error_cost!r}; choose one of {', '.join(ERROR_COSTS)}")
        self.check_error_cost()
        if self.validation_mix not in VALIDATION_MIXES:
            raise ValueError(f"unknown validation_mix {self.validation_mix!r}; choose one of {', '.join(VALIDATION_MIXES)}")
        for name, spec in RANGES.items():
            if settings.get(name) is not None:
                check_range(name, settings[name], spec)
        if learner.max_seed is not None and self.seed > learner.max_seed:
            raise ValueError(f"seed must be at most {learner.max_seed} for {self.agent} (SB3 seeds NumPy with 32 bits), "
                             f"got {self.seed}")
        check_run_name(self.run_name)
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        return cls.from_values(json.loads(text))

    @classmethod
    def from_values(cls, values: dict) -> TrainConfig:
        """The config of ``values`` (a config.json's, or the settings a checkpoint recorded),
        written by this version or an earlier one (:func:`nested`)."""
        values = nested(values)
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"config has unknown fields {sorted(unknown)}; was it written by another version?")
        return cls(**values)

    def save(self, path: Path) -> None:
        atomic_write_text(Path(path), self.to_json())


COMMON = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"learner_options"}
"""The settings every run shares: the config's own fields."""
ERROR_COST = TrainConfig.error_cost


def _check_types(kind: type, values: dict) -> None:
    """Each of ``values`` holds a value of the type ``kind`` (a dataclass: the config, or a
    learner's options) annotates it with (an int where a float is asked)."""
    hints = typing.get_type_hints(kind)
    for name, value in values.items():
        kinds = typing.get_args(hints[name]) or (hints[name],)
        if value is None and type(None) in kinds:
            continue
        kinds = tuple(typing.get_origin(k) or k for k in kinds if k is not type(None))
        accepted = kinds + ((int,) if float in kinds else ())
        if isinstance(value, bool) != (bool in kinds) or not isinstance(value, accepted):
            expected = " or ".join(KIND_NAMES.get(k, f"a {k.__name__}") for k in kinds)
            raise ValueError(f"{name} must be {expected}" + (" or null" if type(None) in typing.get_args(hints[name]) else "")
                             + f", got {value!r}")


def nested(values: dict) -> dict:
    """``values`` (a config.json, or the settings a checkpoint recorded) as this version writes
    them. Written before the learners' options nested, its options are top-level fields
    (:data:`BEFORE_NESTING`): those its learner declares move into ``learner_options``, the
    others, which it never read, are dropped; older changes are undone first (below)."""
    values = dict(values)
    if values.pop("extra", {}):  # earlier configs: SB3 settings, now n_envs and sb3_kwargs, counted env steps
        raise ValueError("this config was written before --n-envs and --sb3-kwargs, when SB3 iterations were "
                         "environment steps; start a new run")
    values.setdefault("validation_mix", "train")  # configs written before it held out the training mix
    if not any(name in values for name in BEFORE_NESTING):
        return values
    spec = learner_spec(values.get("agent") or TrainConfig.agent)
    values.setdefault("head_weight", 0.0)  # configs written before it trained heads by their routed share alone
    values.setdefault("double_q", False)  # configs written before it: DQN's one-step max targets
    if values.get("execution") is None:  # written when None meant the agent's default execution, which was
        sampled = "router_lr_scale" not in values and not spec.trains_through_env and \
            values.get("policy") in ("eps-greedy", "greedy")  # sampled for these policies, before the task suite
        values["execution"] = "sampled" if sampled else "full"
    if "joint_execution" not in values and spec.trains_through_env:  # written when execution also chose the env's
        values["joint_execution"], values["execution"] = values["execution"], "full"  # feature training under SB3
    own, declared = dict(values.get("learner_options") or {}), spec.option_names()
    for name in BEFORE_NESTING:
        value = values.pop(name, None)
        if name in declared and value is not None:
            own.setdefault(name, value)
    return {**values, "learner_options": own}


def make_config(preset: str = DEFAULT_PRESET, archs: Sequence[str] | None = None,
                static_archs: Sequence[str] | None = None, **overrides) -> TrainConfig:
    """A validated config: the preset's values, then ``overrides`` (fields set to None are
    treated as not given): common fields, the learner's options by name, or ``learner_options``;
    ``archs``, ``static_archs``: the nets the env's task offers (see :meth:`TrainConfig.validate`)."""
    if preset not in PRESET_VALUES:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    declared = learner_spec(overrides.get("agent") or TrainConfig.agent).option_names()
    options = {name: value for name, value in PRESET_VALUES[preset].items() if name in declared}
    options.update(overrides.pop("learner_options", None) or {})
    unknown = set(overrides) - COMMON - declared_options()
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}")
    given = {name: value for name, value in overrides.items() if value is not None}
    options.update({name: value for name, value in given.items() if name not in COMMON})
    values = {**{name: value for name, value in PRESET_VALUES[preset].items() if name in COMMON},
              **{name: value for name, value in given.items() if name in COMMON}}
    return TrainConfig(preset=preset, **values, learner_options=options).validate(archs, static_archs)
