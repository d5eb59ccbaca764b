"""The cost of inference: c_inf = c_err + c_cpt, with c_cpt = k_cpt × MACs (paper, Section 3.2)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

K_CPT_VALUES = (0.0, 1e-9, 2e-9, 4e-9, 8e-9, 1.6e-8, 3.2e-8, 6.4e-8)
"""The paper's costs per MAC; a dynamic-k_cpt net samples one of them per training example."""

K_CPT_MAX = 1.0
"""The largest cost per MAC accepted: one MAC then costs as much as a wrong answer (tiny test
nets need costs far above the paper's), while k_cpt × MACs, and its square in critic
losses, stays far inside float32's range for any net that fits in memory."""

ERROR_COSTS = ("cross_entropy", "zero_one")


def error_cost(logits: torch.Tensor, labels: torch.Tensor, kind: str = "cross_entropy") -> torch.Tensor:
    """c_err per example ``(B,)``: cross-entropy (nats), or 0/1 classification error."""
    if kind == "cross_entropy":
        return F.cross_entropy(logits, labels, reduction="none")
    if kind == "zero_one":
        return (logits.argmax(-1) != labels).to(logits.dtype)
    raise ValueError(f"unknown error cost {kind!r}; choose one of {', '.join(ERROR_COSTS)}")


def computation_cost(macs: torch.Tensor | int | float, k_cpt: torch.Tensor | float) -> torch.Tensor:
    """c_cpt = k_cpt × MACs; ``k_cpt`` is a cost per MAC (a float or one per example)."""
    macs = torch.as_tensor(macs)
    return torch.as_tensor(k_cpt, dtype=torch.float64, device=macs.device) * macs.to(torch.float64)


def check_k_cpt(k_cpt: float) -> float:
    """A fixed k_cpt must be a finite number in [0, :data:`K_CPT_MAX`]."""
    try:
        value = float(k_cpt)
    except (TypeError, ValueError):
        raise ValueError(f"k_cpt must be a number >= 0 (cost per MAC, e.g. 4e-9), got {k_cpt!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"k_cpt must be a finite number >= 0 (cost per MAC, e.g. 4e-9), got {k_cpt!r}")
    if value > K_CPT_MAX:
        raise ValueError(f"k_cpt must be at most {K_CPT_MAX:g} per MAC (the paper's costs run from 0 to "
                         f"{max(K_CPT_VALUES):g}), got {k_cpt!r}")
    return value
