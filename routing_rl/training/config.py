"""Typed training configuration and its presets.

One :class:`TrainConfig` describes a run completely; it is saved beside the run as
``config.json`` and every field is a command-line flag of ``experiments/train_agent.py``
(``k_cpt`` → ``--k-cpt``). A preset fills the schedule-related fields; any field given
explicitly wins over the preset.

Presets:
  * ``paper`` — the paper's schedule: 80,000 iterations of batch 128; lr 0.1, τ and ε
    halving every 10,000 iterations.
  * ``cpu-small`` — the same shape compressed 20× in time (4,000 iterations, every
    half-life 500), so that one 8-column net trains in minutes on a 2-core CPU.
  * ``quick`` — the default: 600 iterations with the same shape, a first real result in a
    few minutes on a CPU.
  * ``smoke`` — a few iterations on a small batch and a few hundred examples, for tests.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from routing_rl.core.costs import ERROR_COSTS, check_k_cpt
from routing_rl.nets.multiscale import arch_names

AGENTS = ("static", "actor", "critic", "optimistic-critic", "threshold", "dqn", "ppo", "a2c")
POLICIES = ("softmax", "eps-greedy", "greedy")
EXECUTIONS = ("full", "sampled")
PRESETS = ("smoke", "quick", "cpu-small", "paper")
DEFAULT_PRESET = "quick"
SB3_AGENTS = ("dqn", "ppo", "a2c")
RESUME_OVERRIDES = ("device", "data_dir", "download")
"""Settings of the machine, not of the experiment: the only ones a resumed run may change."""

AGENT_POLICIES = {
    "static": (),
    "threshold": (),
    "actor": ("softmax",),
    "critic": ("softmax", "eps-greedy", "greedy"),
    "optimistic-critic": ("softmax", "eps-greedy", "greedy"),
    "dqn": ("eps-greedy",),
    "ppo": ("softmax",),
    "a2c": ("softmax",),
}
"""Training routing policies each agent can use; the first is its default. PPO and A2C
sample from their own categorical (softmax) policy; DQN explores ε-greedily."""

PRESET_VALUES: dict[str, dict] = {
    "paper": dict(iterations=80_000, batch_size=128, lr_half_life=10_000, tau_half_life=10_000,
                  epsilon_half_life=10_000, eval_every=5_000, checkpoint_every=5_000),
    "cpu-small": dict(iterations=4_000, batch_size=128, lr_half_life=500, tau_half_life=500,
                      epsilon_half_life=500, eval_every=250, checkpoint_every=500),
    "quick": dict(iterations=600, batch_size=128, lr_half_life=75, tau_half_life=75,
                  epsilon_half_life=75, eval_every=100, checkpoint_every=100, eval_examples=2_000),
    "smoke": dict(iterations=20, batch_size=16, lr_half_life=10, tau_half_life=10,
                  epsilon_half_life=10, eval_every=10, checkpoint_every=10, eval_examples=64,
                  train_examples=256),
}


@dataclass
class TrainConfig:
    """Everything that defines a training run. Units: iterations are optimiser steps
    (environment steps for SB3 agents), k_cpt is a cost per MAC."""

    agent: str = "actor"
    policy: str | None = None  # None: the agent's default (AGENT_POLICIES)
    env: str = "routing_rl/HybridRouting-v0"  # a registered routing task's id, or "module:id"
    dataset: str | None = None  # None: the env's dataset
    arch: str | None = None  # None: the task's default (static-8 for the static agent, chain for the others)
    width: int = 1
    k_cpt: float | str = 4e-9  # a cost per MAC, or "dynamic" (sampled from K_CPT_VALUES)
    preset: str = DEFAULT_PRESET
    iterations: int = 4_000
    batch_size: int = 128
    lr: float = 0.1
    lr_half_life: int = 500
    momentum: float = 0.9
    tau: float | None = None  # None: 1.0 for the actor, 0.1 for critics
    tau_half_life: int = 500
    epsilon: float = 0.1
    epsilon_half_life: int = 500
    k_dec: float = 0.01
    k_ure: float = 0.001
    k_l2: float = 1e-4
    talr: bool = True
    execution: str | None = None  # None: full tree for the actor and softmax critics, sampled for ε-greedy/greedy
    error_cost: str = "cross_entropy"
    utility_error: str = "cross_entropy"  # "zero_one": the paper's 0/1-error critic variant
    probability_floor: float = 1e-6
    validation_fraction: float = 0.1
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
    extra: dict = field(default_factory=dict)  # agent-specific settings that have no flag

    @property
    def dynamic_k_cpt(self) -> bool:
        return self.k_cpt == "dynamic"

    @property
    def resolved_policy(self) -> str | None:
        allowed = AGENT_POLICIES[self.agent]
        return self.policy if self.policy is not None else (allowed[0] if allowed else None)

    @property
    def resolved_tau(self) -> float:
        if self.tau is not None:
            return self.tau
        return 1.0 if self.agent == "actor" else 0.1

    @property
    def resolved_execution(self) -> str:
        if self.execution is not None:
            return self.execution
        return "sampled" if self.resolved_policy in ("eps-greedy", "greedy") else "full"

    def validate(self, archs: Sequence[str] | None = None) -> TrainConfig:
        """Raise ValueError naming the first bad field and how to fix it.

        ``archs``: the nets the env's task offers (default: the paper's multiscale nets);
        the rules tying agents to ``static-N`` / ``chain`` apply to the paper's nets only.
        """
        if self.agent not in AGENTS:
            raise ValueError(f"unknown agent {self.agent!r}; choose one of {', '.join(AGENTS)}")
        allowed = AGENT_POLICIES[self.agent]
        if self.policy is not None and self.policy not in allowed:
            if self.policy not in POLICIES:
                raise ValueError(f"unknown policy {self.policy!r}; choose one of {', '.join(POLICIES)}")
            can = f"can only use {', '.join(allowed)}" if allowed else "has no training routing policy"
            raise ValueError(f"agent {self.agent!r} {can}; drop --policy or pick another agent")
        paper = archs is None
        archs = arch_names() if archs is None else list(archs)
        if self.arch is None:
            if not paper:
                raise ValueError("no arch given; choose one of the task's: " + ", ".join(archs))
            self.arch = "static-8" if self.agent == "static" else "chain"
        if self.arch not in archs:
            raise ValueError(f"unknown arch {self.arch!r}; choose one of {', '.join(archs)}")
        paper_net = self.arch in arch_names()  # a task's own net: its learner checks that it can train it
        if paper_net and self.agent == "static" and not self.arch.startswith("static-"):
            raise ValueError(f"the static agent trains static-N nets (N = 1..8), got --arch {self.arch}; use e.g. --arch static-8")
        if paper_net and self.agent != "static" and self.arch.startswith("static-"):
            raise ValueError(f"agent {self.agent!r} needs junctions to route at; use --arch chain or tree, or --agent static")
        if paper_net and self.agent == "threshold" and self.arch != "chain":
            raise ValueError(f"threshold early exit puts a head on every column of a chain, got --arch {self.arch}; use --arch chain")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {', '.join(PRESETS)}")
        if self.k_cpt != "dynamic":
            self.k_cpt = check_k_cpt(self.k_cpt)
        if self.dynamic_k_cpt and self.agent in ("static", "threshold"):
            raise ValueError(f"agent {self.agent!r} has no routers to read k_cpt; use a fixed --k-cpt")
        for name in ("error_cost", "utility_error"):
            if getattr(self, name) not in ERROR_COSTS:
                raise ValueError(f"unknown {name} {getattr(self, name)!r}; choose one of {', '.join(ERROR_COSTS)}")
        if self.error_cost != "cross_entropy" and self.agent not in SB3_AGENTS:
            raise ValueError(
                f"error_cost {self.error_cost!r} has no gradient for the heads to learn from; keep cross_entropy "
                "(a critic can use --utility-error zero_one inside its utility)"
            )
        if self.execution is not None and self.execution not in EXECUTIONS:
            raise ValueError(f"unknown execution {self.execution!r}; choose one of {', '.join(EXECUTIONS)}")
        if self.agent == "actor" and self.resolved_execution != "full":
            raise ValueError("the actor needs the full tree (exact expectations); drop --execution=sampled")
        for name in ("iterations", "batch_size", "width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "lr_half_life", "tau_half_life", "epsilon_half_life", "eval_every", "checkpoint_every"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon!r}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}")
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        values = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"config has unknown fields {sorted(unknown)}; was it written by another version?")
        return cls(**values)

    def save(self, path: Path) -> None:
        from routing_rl.training.checkpoint import atomic_write_text

        atomic_write_text(Path(path), self.to_json())


def make_config(preset: str = DEFAULT_PRESET, archs: Sequence[str] | None = None, **overrides) -> TrainConfig:
    """A validated config: the preset's values, then ``overrides`` (fields set to None are
    treated as not given); ``archs``: the nets the env's task offers (see :meth:`TrainConfig.validate`)."""
    if preset not in PRESET_VALUES:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}")
    values = {**PRESET_VALUES[preset], **{k: v for k, v in overrides.items() if v is not None}}
    return TrainConfig(preset=preset, **values).validate(archs)
