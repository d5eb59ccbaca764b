"""Training routing policies: how a junction's scores become probabilities over its sinks.

* ``softmax`` — ``softmax(scores / tau)`` (the paper's policy, Section 4.1);
* ``eps-greedy`` — the argmax sink with probability ``1 - epsilon``, else a uniform sink;
* ``greedy`` — the argmax sink.

Exploration may follow a *prior* over a junction's sinks instead of the uniform: with the
number of leaves below each sink (:meth:`~routing_rl.core.paths.Paths.leaves_below`), an
exploring example reaches every leaf equally often, where uniform sinks halve its chance of
going deeper at every 2-way junction of a chain. The softmax takes the prior as a bias on its
logits (``softmax(scores / tau + log prior)``), which exploration at a high tau follows and
the argmax at a low tau ignores. A sink whose prior is 0 is no training choice at all: the
softmax gives it no mass and the ε-greedy and greedy argmax skip it (``deep`` exploration:
every training path runs on past the exits, whose heads are priced on the way).

Every policy's probabilities are then *floored*: mixed with the uniform distribution,
``(1 - floor) * p + floor / n``, so that no sink — and so no path — ever has exactly zero
probability (the authors' release mixed in 1e-6). The temperature and epsilon decay by
continuous halving (:func:`halving`) on the iteration clock.

:func:`sample` turns a policy into a :data:`~routing_rl.core.execution.Decide` that samples one
sink per example, for sampled-decision training with :func:`~routing_rl.core.execution.route`;
:func:`sample_with` does the same from uniform numbers drawn in advance for every example.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from routing_rl.core.execution import Decide, Junction


MAX_HALVINGS = 30
"""Schedules stop halving here, at ``2^-30 ≈ 1e-9`` of their start (the paper's schedule
halves 8 times): a temperature never underflows to 0, and ``scores / tau`` stays finite."""


def halving(value: float, iteration: float, half_life: float) -> float:
    """``value`` halved every ``half_life`` iterations, continuously, ``value · 0.5^(t / h)``,
    down to its floor ``value · 0.5^MAX_HALVINGS``."""
    return value * 0.5 ** min(iteration / half_life, MAX_HALVINGS)


def softmax_probabilities(scores: torch.Tensor, tau: float, prior: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(scores / tau + log prior)`` over the sinks, ``(b, n)`` (``prior`` ``(n,)``
    positive; None: uniform). The largest score is subtracted first (softmax does not change),
    so a small ``tau`` gives ``-inf`` for unlikely sinks, never ``inf - inf = NaN``."""
    logits = (scores - scores.detach().amax(1, keepdim=True)) / tau
    return F.softmax(logits if prior is None else logits + prior.log(), dim=1)


def greedy_probabilities(scores: torch.Tensor) -> torch.Tensor:
    """One-hot on the argmax sink, ``(b, n)`` (no gradient reaches the scores)."""
    return F.one_hot(scores.argmax(1), scores.shape[1]).to(scores.dtype)


def within_prior(scores: torch.Tensor, prior: torch.Tensor | None) -> torch.Tensor:
    """``scores`` with the sinks of zero ``prior`` at ``-inf``, so that no argmax picks them."""
    return scores if prior is None else scores.masked_fill(prior == 0, float("-inf"))


def eps_greedy_probabilities(scores: torch.Tensor, epsilon: float, prior: torch.Tensor | None = None) -> torch.Tensor:
    """The argmax sink with probability ``1 - epsilon``, otherwise a random sink: uniform, or
    in proportion to ``prior`` ``(n,)`` (the argmax too skips the sinks of zero prior)."""
    explore = 1.0 / scores.shape[1] if prior is None else prior / prior.sum()
    return (1.0 - epsilon) * greedy_probabilities(within_prior(scores, prior)) + epsilon * explore


def floored(probabilities: torch.Tensor, floor: float) -> torch.Tensor:
    """``(1 - floor) · p + floor / n``: every sink keeps at least ``floor / n``."""
    return (1.0 - floor) * probabilities + floor / probabilities.shape[1]


@dataclass(frozen=True)
class TrainingPolicy:
    """A training routing policy with its decay schedule.

    Args:
        name: ``softmax``, ``eps-greedy`` or ``greedy``.
        start: tau (softmax) or epsilon (eps-greedy) at iteration 0; ignored by greedy.
        half_life: iterations over which ``start`` halves.
        floor: the probability mass spread uniformly over the sinks, in (0, 1).
    """

    name: str
    start: float = 1.0
    half_life: float = 10_000
    floor: float = 1e-6

    def __post_init__(self) -> None:
        if self.name not in ("softmax", "eps-greedy", "greedy"):
            raise ValueError(f"unknown routing policy {self.name!r}; choose softmax, eps-greedy or greedy")
        if not 0.0 < self.floor < 1.0:
            raise ValueError(f"the probability floor must be in (0, 1) so that no path has zero probability, got {self.floor!r}")
        if self.name == "softmax" and not self.start > 0:
            raise ValueError(f"the softmax temperature tau must be > 0, got {self.start!r}")
        if not self.half_life > 0:
            raise ValueError(f"half_life must be > 0, got {self.half_life!r}")

    def value(self, iteration: float) -> float:
        """tau or epsilon at ``iteration`` (0 for greedy)."""
        return 0.0 if self.name == "greedy" else halving(self.start, iteration, self.half_life)

    def probabilities(self, scores: torch.Tensor, iteration: float, prior: torch.Tensor | None = None) -> torch.Tensor:
        """Floored training probabilities ``(b, n)`` from scores ``(b, n)``; ``prior`` ``(n,)``:
        where exploration goes (None: uniform over the sinks; see the module docstring).

        Differentiable in the scores for softmax (the actor's gradients flow through them);
        callers that treat the policy as constant pass detached scores.
        """
        if self.name == "softmax":
            p = softmax_probabilities(scores, self.value(iteration), prior)
        elif self.name == "eps-greedy":
            p = eps_greedy_probabilities(scores, self.value(iteration), prior)
        else:
            p = greedy_probabilities(within_prior(scores, prior))
        return floored(p, self.floor)

    def charts(self, iteration: float) -> dict[str, float]:
        """The schedule's TensorBoard scalar: ``charts/tau`` or ``charts/epsilon`` (none for greedy)."""
        if self.name == "softmax":
            return {"charts/tau": self.value(iteration)}
        if self.name == "eps-greedy":
            return {"charts/epsilon": self.value(iteration)}
        return {}


def sample(policy: TrainingPolicy, iteration: float, generator: torch.Generator | None = None,
           priors: dict[str, torch.Tensor] | None = None) -> Decide:
    """A ``decide`` that samples each example's sink from ``policy``'s probabilities.

    ``generator`` (on the scores' device) makes the draws reproducible; ``priors``: junction
    name -> its exploration prior (None: uniform). Sampling never carries gradient: the
    sampled path is a constant of the loss.
    """

    def decide(junction: Junction) -> torch.Tensor:
        p = policy.probabilities(junction.scores.detach(), iteration, (priors or {}).get(junction.name))
        return torch.multinomial(p, 1, generator=generator).squeeze(1)

    return decide


def sample_with(policy: TrainingPolicy, iteration: float, uniforms: dict[str, torch.Tensor],
                priors: dict[str, torch.Tensor] | None = None) -> Decide:
    """A ``decide`` like :func:`sample` whose randomness is drawn in advance: at junction ``j``
    example ``i`` of the batch takes the first sink whose cumulative probability exceeds
    ``uniforms[j][i]`` (inverse CDF; ``uniforms[j]`` ``(B,)`` in [0, 1)).

    Data-parallel training draws the uniforms of the global batch on every process and hands
    each its shard's, so an example's decisions do not depend on which process holds it.
    """

    def decide(junction: Junction) -> torch.Tensor:
        p = policy.probabilities(junction.scores.detach(), iteration, (priors or {}).get(junction.name))
        u = uniforms[junction.name][junction.index]
        return (p.cumsum(1) <= u[:, None]).sum(1).clamp_max(p.shape[1] - 1)

    return decide
