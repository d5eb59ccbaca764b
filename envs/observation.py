"""What an agent sees at a junction, and what its action means there.

One observation space and one action space cover every junction of a net, although
junctions differ in descriptor size and number of sinks:

* observation — ``float32`` vector ``[descriptor | junction one-hot | k_cpt × 1e7]``:
  the junction node's descriptor (what its router would read), zero-padded to the largest
  descriptor in the net; a one-hot of the junction's position in ``net.junctions``; and,
  only when k_cpt is dynamic, the episode's cost per ten million MACs (as the paper's
  routers read it). At a leaf (the terminal observation) descriptor and one-hot are zero.
  Descriptors are unbounded (ReLU features of any size), so their bounds are ±inf; the
  one-hot lies in [0, 1] and the k_cpt entry in [0, max(K_CPT_VALUES) × 1e7].
* action — ``Discrete(max sinks)``: sink ``a`` of the current junction. A junction with
  fewer sinks reads an action past its last sink as its last sink (:meth:`sinks`): in the
  paper's nets sink 0 is "exit here" and the others go deeper, so a "go deeper" action stays
  one where fewer ways go deeper.

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


class ObservationLayout:
    """The observation and action spaces of routing decisions in ``net``.

    Args:
        net: the routed net; it must have at least one junction.
        dynamic_k_cpt: whether observations end with the episode's k_cpt × 1e7.

    Attributes:
        junctions: junction names, in the order of the one-hot.
        n_sinks: ``(J,)`` sinks of each junction.
        descriptor_size: the padded descriptor length.
        size: the observation length.
    """

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
        """The sink each action picks at ``junction``: actions past the last sink take the last."""
        return np.minimum(actions, self.n_sinks[self.junction_index[junction]] - 1)

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
