"""The one place a net is built and seeded.

Learners, SB3 baselines and environments all build their :class:`~routing_rl.core.graph.RoutedNet`
through :func:`seeded_net`: the same seed gives the same initial weights whoever builds it,
and torch's global random state is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from routing_rl.core.graph import RoutedNet
from routing_rl.core.seeds import manual_seed


def seeded_net(build: Callable[[], RoutedNet], seed: int, device: str | torch.device = "cpu") -> RoutedNet:
    """``build()`` with torch's CPU generator seeded by ``seed``, moved to ``device``.

    Weights are initialised on the CPU, so a seed gives the same net on every device.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"a net's seed must be an integer >= 0, got {seed!r}")
    with torch.random.fork_rng(devices=[]):
        manual_seed(seed)
        net = build()
    if not isinstance(net, RoutedNet):
        raise TypeError(f"a net builder must return a RoutedNet, got {type(net).__name__}")
    return net.to(device)
