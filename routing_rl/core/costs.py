"""The error part of the cost of inference c_inf = c_err + c_cpt (paper, Section 3.2); c_cpt and
k_cpt live in :mod:`routing_rl.core.k_cpt`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

ERROR_COSTS = ("cross_entropy", "zero_one")


def error_cost(logits: torch.Tensor, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
    """c_err per example ``(B,)``: cross-entropy (nats), or 0/1 classification error."""
    if kind == "cross_entropy":
        return F.cross_entropy(logits, labels, reduction="none")
    if kind == "zero_one":
        return (logits.argmax(-1) != labels).to(logits.dtype)
    raise ValueError(f"unknown error cost {kind!r}; choose one of {', '.join(ERROR_COSTS)}")


def guess_cost(classes: int, kind: str = "cross_entropy") -> float:
    """The expected c_err of a uniform guess over ``classes``: ln(classes) nats, or 1 - 1/classes."""
    if kind not in ERROR_COSTS:
        raise ValueError(f"unknown error cost {kind!r}; choose one of {', '.join(ERROR_COSTS)}")
    return math.log(classes) if kind == "cross_entropy" else 1.0 - 1.0 / classes
