"""The NaN guard: training stops at the first non-finite loss instead of training on NaN.

A diverged step leaves NaN or infinite weights that every later step, evaluation and
checkpoint would carry. Learners and the envs' joint training check each loss they already
read back as a float (no extra device synchronisation) and raise :class:`NonFiniteLossError`;
the last checkpoint written before it stays the run's last good state.
"""

from __future__ import annotations

import math


class NonFiniteLossError(ArithmeticError):
    """Training produced a NaN or infinite loss; the message says where and what to change."""


def check_finite(value: float, what: str, iteration: int, lr: float, kept: str = "") -> None:
    """Raise :class:`NonFiniteLossError` when ``value`` (``what``, e.g. "training loss") is NaN
    or infinite at ``iteration`` (counted from 1) with learning rate ``lr``; ``kept`` says
    which checkpoint survives."""
    if not math.isfinite(value):
        raise NonFiniteLossError(diverged(f"the {what} became {value}", iteration, lr, kept))


def diverged(what: str, iteration: int, lr: float, kept: str = "") -> str:
    """The guard's one line: what went non-finite, where, what survives and what to change."""
    kept = f"; {kept}" if kept else ""
    return (f"{what} at iteration {iteration} (learning rate {lr:g}), so training stopped{kept}; "
            "lower --lr (or raise --k-l2, lower --k-cpt) and start the run again")
