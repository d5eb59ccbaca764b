"""What an agent sees at a junction, and what its action means there.

One observation space and one action space cover every junction of a net, although
junctions differ in descriptor size and number of sinks:

* observation — ``float32`` vector ``[descriptor | junction one-hot | k_cpt]``:
  the junction node's descriptor (what its router would read), zero-padded to the largest
  descriptor in the net; a one-hot of the junction's position in ``net.junctions``; and,
  only when k_cpt is dynamic, the episode's cost per MAC as the routers read it
  (:func:`~routing_rl.core.k_cpt.router_input`). At a leaf (the terminal observation) descriptor and one-hot are zero.
  Descriptors are unbounded (ReLU features of any size), so their bounds are ±inf; the
  one-hot lies in [0, 1] and the k_cpt entry in [0, router_input(max(K_CPT_VALUES))].
* action — ``Discrete(max sinks)``: sink ``a`` of the current junction. Where junctions
  have different numbers of sinks (the tree), :meth:`ObservationLayout.masks` says which
  actions are valid (the envs' ``action_masks()``, for sb3-contrib's ``MaskablePPO``), and an
  action past the junction's last sink raises ValueError — unless ``clip_actions`` is on
  (for agents that cannot mask, such as DQN), when it takes the last sink: in the paper's
  nets sink 0 is "exit here" and the others go deeper, so "go deeper" stays one.

:class:`ObservationLayout` builds the same vector for the environments (a whole batch of
in-flight examples at once) and for evaluation (:func:`observe` from a
:class:`~routing_rl.core.execution.Junction`), so an agent is judged on exactly what it trained on.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import K_CPT_VALUES, router_input

DESCRIPTOR_BOUND = 1e6


def descriptor_sizes(net: RoutedNet) -> dict[str, int]:
    """Junction name -> size of its descriptor, measured on one blank input in eval mode."""
    device = net.leaf_macs.device
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            out = net(torch.zeros(1, *net.input_shape, device=device), k_cpt=0.0 if net.k_cpt_input else None)
    finally:
        net.train(was_training)
    return {name: int(out.descriptors[name].shape[1]) for name in net.junctions}


def check_actions(actions, n: int, n_actions: int) -> np.ndarray:
    """``(n,)`` int64 actions from what an agent gave; ValueError for anything else.

    Accepted: ``n`` whole numbers in ``0..n_actions - 1`` (ints, or floats that are whole),
    as an array, a list, or a scalar when ``n`` is 1. Refused, naming the problem: None,
    strings, booleans, fractions (0.7), NaN, numbers out of range (2**63), other shapes.
    """
    if type(actions) is int or isinstance(actions, np.integer):  # one env's usual action: no array checks
        if n == 1 and 0 <= actions < n_actions:
            return np.array([actions], dtype=np.int64)
    elif isinstance(actions, np.ndarray) and actions.dtype.kind in "iu" and actions.shape == (n,):  # an agent's batch
        if n == 0 or (actions.min() >= 0 and actions.max() < n_actions):
            return actions.astype(np.int64, copy=False)
    expected = f"{n} integer action{'s' if n > 1 else ''} in 0..{n_actions - 1}"
    if actions is None:
        raise ValueError(f"expected {expected}, got None")
    try:
        array = np.asarray(actions)
    except (TypeError, ValueError):
        raise ValueError(f"expected {expected}, got {actions!r}") from None
    if array.dtype.kind not in "iuf":
        raise ValueError(f"expected {expected}, got {actions!r} ({array.dtype} values)")
    if array.size != n or array.ndim > 2 or (array.ndim == 2 and array.shape[1] != 1):
        raise ValueError(f"expected {expected} (shape ({n},)), got shape {array.shape}")
    array = array.reshape(n)
    if array.dtype.kind == "f" and not (np.isfinite(array).all() and (array == np.round(array)).all()):
        raise ValueError(f"expected {expected}, got {array.tolist()}: actions are sink numbers, not fractions")
    if n and (array.min() < 0 or array.max() > n_actions - 1):
        raise ValueError(f"expected {expected}, got {array.tolist()}")
    return array.astype(np.int64)


class ObservationLayout:
    """The observation and action spaces of routing decisions in ``net``.

    Args:
        net: the routed net; it must have at least one junction.
        dynamic_k_cpt: whether observations end with the episode's k_cpt (as routers read it).

    Attributes:
        junctions: junction names, in the order of the one-hot.
        n_sinks: ``(J,)`` sinks of each junction.
        descriptor_size: the padded descriptor length.
        size: the observation length.
    """

    clip_actions = False
    """Whether an action past a junction's last sink takes the last sink instead of raising."""

    def __init__(self, net: RoutedNet, dynamic_k_cpt: bool = False):
        if not net.junctions:
            raise ValueError("this net has no junctions, so there is no routing decision to make; use a chain or tree net")
        self.junctions = list(net.junctions)
        self.junction_index = {name: j for j, name in enumerate(self.junctions)}
        self.n_sinks = np.array([len(net.nodes[name].sinks) for name in self.junctions], dtype=np.int64)
        self.dynamic_k_cpt = dynamic_k_cpt
        self.descriptor_size = max(descriptor_sizes(net).values())
        self.size = self.descriptor_size + len(self.junctions) + int(dynamic_k_cpt)
        low = np.zeros(self.size, dtype=np.float32)
        high = np.ones(self.size, dtype=np.float32)
        low[: self.descriptor_size], high[: self.descriptor_size] = -DESCRIPTOR_BOUND, DESCRIPTOR_BOUND
        if dynamic_k_cpt:
            high[-1] = router_input(max(K_CPT_VALUES))
        self.observation_space = spaces.Box(low, high, dtype=np.float32)
        self.action_space = spaces.Discrete(int(self.n_sinks.max()))

    @classmethod
    def matching(cls, net: RoutedNet, observation_space: spaces.Box) -> ObservationLayout:
        """The layout of ``net`` whose observations fit ``observation_space`` (an agent's)."""
        for dynamic_k_cpt in (False, True):
            layout = cls(net, dynamic_k_cpt)
            if layout.observation_space.shape == observation_space.shape:
                return layout
        raise ValueError(
            f"an agent observing {observation_space.shape} cannot route this net: its observations "
            f"have {layout.size - 1} entries, or {layout.size} with a dynamic k_cpt"
        )

    def sinks(self, junction: str, actions: np.ndarray) -> np.ndarray:
        """The sink each action (checked by :func:`check_actions`) picks at ``junction``."""
        n_sinks = self.n_sinks[self.junction_index[junction]]
        if self.clip_actions:
            return np.minimum(actions, n_sinks - 1)
        if actions.size and actions.max() >= n_sinks:
            raise ValueError(f"action {int(actions.max())} at junction {junction!r}, which has only sinks "
                             f"0..{n_sinks - 1}; mask actions with the env's action_masks() (sb3-contrib's "
                             "MaskablePPO does), or make the env with clip_actions=True")
        return actions

    def masks(self, junctions: list[str | None]) -> np.ndarray:
        """``(b, max sinks)`` bool: the valid actions of examples at ``junctions`` (None: at
        a leaf, where every action is accepted and ignored)."""
        out = np.ones((len(junctions), self.action_space.n), dtype=bool)
        for row, name in enumerate(junctions):
            if name is not None:
                out[row, self.n_sinks[self.junction_index[name]]:] = False
        return out

    def write(self, out: torch.Tensor, rows, junction: str, descriptor: torch.Tensor) -> None:
        """Fill descriptor and one-hot of ``out[rows]`` (zeros elsewhere) for examples at ``junction``."""
        out[rows, : descriptor.shape[1]] = descriptor.to(out.dtype).clamp(-DESCRIPTOR_BOUND, DESCRIPTOR_BOUND)
        out[rows, self.descriptor_size + self.junction_index[junction]] = 1.0

    def terminal(self, k_cpt: np.ndarray) -> np.ndarray:
        """``(b, size)`` observations at a leaf: zeros, but for the k_cpt entry when dynamic."""
        out = np.zeros((len(k_cpt), self.size), dtype=np.float32)
        if self.dynamic_k_cpt:
            out[:, -1] = router_input(k_cpt)
        return out

    def observe(self, junction: str, descriptor: torch.Tensor, k_cpt) -> np.ndarray:
        """``(b, size)`` observations of ``b`` examples at ``junction`` with router input
        ``descriptor`` ``(b, D)``; ``k_cpt`` (a float or ``(b,)``) is read only when dynamic."""
        out = torch.zeros(descriptor.shape[0], self.size, dtype=torch.float32, device=descriptor.device)
        self.write(out, slice(None), junction, descriptor)
        if self.dynamic_k_cpt:
            if k_cpt is None:
                raise ValueError("observations with a dynamic k_cpt need the examples' k_cpt")
            out[:, -1] = router_input(torch.as_tensor(k_cpt, dtype=torch.float32, device=out.device))
        return out.cpu().numpy()
