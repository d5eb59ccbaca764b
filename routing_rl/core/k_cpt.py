"""The k_cpt model: what computation costs, c_cpt = k_cpt × cost (paper, Sections 3.2 and 4.6).

* ``k_cpt`` is a cost per unit of computation — per MAC, or per MAC-equivalent under a
  measured-latency :class:`CostModel` (:mod:`routing_rl.core.latency`). It is fixed, or
  ``"dynamic"``: one of :data:`K_CPT_VALUES` drawn per training example (per episode in the
  envs), read by the routers (:func:`router_input`) and evaluated at every value.
* ``cost`` is what each node charges per example (:class:`CostModel`): its transform's and
  router's MACs, or their measured time expressed in MAC-equivalents.

Every learner, the envs' rewards and the evaluator take k_cpt and costs from here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch

K_CPT_VALUES = (0.0, 1e-9, 2e-9, 4e-9, 8e-9, 1.6e-8, 3.2e-8, 6.4e-8)
"""The paper's costs per MAC; a dynamic-k_cpt net samples one of them per training example."""

K_CPT_UNIT = 1e-9
"""The paper's smallest nonzero cost per MAC: routers read k_cpt in doublings of it
(:func:`router_input`)."""

K_CPT_MAX = 1.0
"""The largest cost per MAC accepted: one MAC then costs as much as a wrong answer (tiny test
nets need costs far above the paper's), while k_cpt × MACs, and its square in critic
losses, stays far inside float32's range for any net that fits in memory."""
DYNAMIC = "dynamic"
COSTS = ("macs", "latency")
"""What a node's computation is charged by: its MACs, or its measured time (MAC-equivalents)."""


def check_k_cpt(k_cpt) -> float | str:
    """A k_cpt as given by a user: ``"dynamic"``, or a finite number >= 0 (a string is parsed)."""
    if k_cpt == DYNAMIC:
        return DYNAMIC
    try:
        value = float(k_cpt)
    except (TypeError, ValueError):
        raise ValueError(f"k_cpt must be a number >= 0 (cost per MAC, e.g. 4e-9) or 'dynamic', got {k_cpt!r}") from None
    if not value >= 0 or value == math.inf:
        raise ValueError(f"k_cpt must be a finite number >= 0 (cost per MAC, e.g. 4e-9) or 'dynamic', got {k_cpt!r}")
    if value > K_CPT_MAX:
        raise ValueError(f"k_cpt must be at most {K_CPT_MAX:g} per MAC (the paper's costs run from 0 to "
                         f"{max(K_CPT_VALUES):g}), got {k_cpt!r}")
    return value


def router_input(k_cpt: torch.Tensor | np.ndarray | float, unit: float | torch.Tensor = K_CPT_UNIT):
    """What a router (or an agent's observation) reads of k_cpt: ``log2(1 + k_cpt / unit)``,
    0 at k_cpt 0, 1 at ``unit`` and about one more per doubling (0, 1, 1.58, 2.32, 3.17,
    4.09, 5.04, 6.02 on the paper's grid).

    The paper appends k_cpt × 1e7 (cost per ten million MACs). That squeezes its geometric
    grid into [0, 0.64], the five cheapest values within 0.08 of each other, beside hundreds
    of descriptor features of unit scale: a column's gradient and the weight a router needs
    to act on it both scale with its spread, so SGD learns to read it as slowly as the square
    of that spread, and the central values stay indistinguishable. On a log scale every
    doubling of k_cpt moves the input by one, as much as a descriptor feature varies.
    """
    if isinstance(k_cpt, torch.Tensor):
        return torch.log2(1 + k_cpt / unit)
    return np.log2(1 + np.asarray(k_cpt, dtype=np.float64) / unit)


class KCpt:
    """A run's k_cpt: fixed, or dynamic (sampled per example from :data:`K_CPT_VALUES`).

    Args:
        k_cpt: a cost per MAC, or ``"dynamic"``.
    """

    def __init__(self, k_cpt: float | str):
        k_cpt = check_k_cpt(k_cpt)
        self.dynamic = k_cpt == DYNAMIC
        self.values = K_CPT_VALUES if self.dynamic else (k_cpt,)
        """The values it is sampled from, and evaluated at."""
        self._tensors: dict[tuple, torch.Tensor] = {}

    @property
    def observed_high(self) -> float:
        """The largest router input a dynamic k_cpt gives."""
        return float(router_input(max(self.values)))

    def sample(self, batch_size: int, generator: torch.Generator, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``(B,)`` k_cpt of each training example; a fixed k_cpt draws nothing from ``generator``."""
        if not self.dynamic:
            return torch.full((batch_size,), self.values[0], dtype=dtype, device=device)
        key = (dtype, torch.device(device))
        if key not in self._tensors:
            self._tensors[key] = torch.tensor(self.values, dtype=dtype, device=device)
        pick = torch.randint(len(self.values), (batch_size,), generator=generator, device=device)
        return self._tensors[key][pick]

    def sample_numpy(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``(size,)`` float64 k_cpt of each new episode (the envs)."""
        return rng.choice(np.array(self.values), size=size)


class CostModel:
    """What each node of a net charges per example, in ``unit`` s (MACs or MAC-equivalents).

    Args:
        net: the routed net (its structure: order, paths to the leaves).
        node_cost: node name -> cost per example of its transform and router.
        unit: ``"MACs"`` or ``"MAC-equivalents"``.
        profile: the measurement behind the costs (JSON-serialisable), if any.

    Attributes:
        node: name -> cost (float) per example, for every node in ``net.order``.
        leaf: ``(n_leaves,)`` float64 — the cost of the whole path to each leaf.
    """

    def __init__(self, net, node_cost: Mapping[str, float], unit: str = "MACs", profile: dict | None = None):
        missing = set(net.order) - set(node_cost)
        if missing:
            raise ValueError(f"the cost model has no cost for nodes {sorted(missing)}; profile this net again")
        bad = {name: cost for name, cost in node_cost.items() if not (cost >= 0 and math.isfinite(cost))}
        if bad:
            raise ValueError(f"node costs must be finite numbers >= 0, got {bad}")
        self.node = {name: float(node_cost[name]) for name in net.order}
        self.unit = unit
        self.profile = profile
        self.leaf = torch.tensor([sum(self.node[n] for n in net.nodes_to(leaf)) for leaf in net.leaves], dtype=torch.float64)

    @classmethod
    def macs(cls, net) -> CostModel:
        """The paper's cost model: each node's transform and router MACs."""
        return cls(net, {name: net.macs[name] + net.router_macs[name] for name in net.order})

    @property
    def full(self) -> float:
        """The cost per example of every node (full evaluation)."""
        return sum(self.node.values())

    def leaf_cost(self, like: torch.Tensor) -> torch.Tensor:
        """:attr:`leaf` with the dtype and device of ``like``."""
        return self.leaf.to(dtype=like.dtype, device=like.device)

    def to_json(self) -> dict:
        return {"unit": self.unit, "node_cost": self.node, "profile": self.profile}


def expected_c_cpt(p_leaf: torch.Tensor, k_cpt: torch.Tensor, leaf_cost: torch.Tensor) -> torch.Tensor:
    """Batch mean of ``Σ_leaf P_leaf · k_cpt · cost(leaf)``: c_cpt in expectation over the paths.

    p_leaf: ``(B, L)`` path probabilities; k_cpt: ``(B,)``; leaf_cost: ``(L,)``.
    """
    return (p_leaf * k_cpt[:, None] * leaf_cost).sum(1).mean()


def c_cpt(k_cpt, cost):
    """c_cpt = k_cpt × cost, elementwise (tensors, arrays or numbers)."""
    return k_cpt * cost


def eval_values(k_cpt: float | str) -> list[float]:
    """The k_cpt values a run is judged at: every paper value for a dynamic k_cpt."""
    return list(KCpt(k_cpt).values)
