"""Batch-norm statistics that match what each node sees at evaluation.

With sampled decisions a node trains on the sub-batch the training policy routed to it,
often a handful of examples, and its running statistics are a moving average of those
small, shifting sub-batches. :func:`recalibrate` recomputes them as exact averages over
many examples routed by a given policy (the sampled critic's: its training policy, whose
populations its weights were fitted to).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from routing_rl.core.execution import Decide, argmax_decide, route
from routing_rl.core.graph import RoutedNet


@contextmanager
def fresh_statistics(net: RoutedNet) -> Iterator[None]:
    """Inside this block, every batch-norm layer's running mean and variance become the
    average over the forward passes made in it (train mode, no gradient); a layer that no
    pass reaches keeps its statistics. Afterwards momenta and the train/eval mode are restored."""
    norms = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    saved = [(m.momentum, m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in norms]
    was_training = net.training
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # cumulative average over the passes
    net.train()
    try:
        with torch.no_grad():
            yield
    finally:
        for norm, (momentum, mean, var, tracked) in zip(norms, saved):
            norm.momentum = momentum
            if int(norm.num_batches_tracked) == 0:
                norm.running_mean.copy_(mean)
                norm.running_var.copy_(var)
                norm.num_batches_tracked.copy_(tracked)
        net.train(was_training)


def recalibrate(
    net: RoutedNet, images: torch.Tensor, decide: Decide | None = argmax_decide, k_cpt=None, batch_size: int = 512
) -> None:
    """Replace every batch-norm layer's running mean and variance by their average over
    ``images`` ``(N, *input_shape)`` routed with ``decide``, or with every example reaching
    every node where ``decide`` is None (no parameter changes). ``k_cpt``: None, a float, or
    ``(N,)`` per image. A layer no example reaches keeps its statistics."""
    with fresh_statistics(net):
        for start in range(0, len(images), batch_size):
            part = k_cpt[start : start + batch_size] if isinstance(k_cpt, torch.Tensor) and k_cpt.dim() else k_cpt
            part = part if net.k_cpt_input else None
            x = images[start : start + batch_size]
            net(x, part) if decide is None else route(net, x, decide, part)
