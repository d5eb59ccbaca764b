"""Throughput-adjusted learning rates (TALR, paper Section 4.5).

A layer that the training policy reaches with probability ``p_i`` for example ``i`` receives
a gradient ``Σ_i p_i g_i``; scaling it by ``α = 1/‖p‖`` makes the variance of its update match
that of a layer every example passes through. With a mean (not summed) loss over ``B``
examples the same argument gives ``α = 1/sqrt(mean_i p_i²)``, which is what this module
applies — to every parameter of a node (its transform and its router), after ``backward()``
and before the optimiser step, so that it acts as a per-node learning rate.

What ``p`` is depends on the execution:

* full tree — ``p_i`` is the training policy's probability of routing example ``i``
  through the node (the product of junction probabilities on the way), stop-gradient;
* sampled decisions — each example's gradient reaches the node with weight 1 if its sampled
  path went through the node and 0 otherwise, so ``p_i ∈ {0, 1}`` is that indicator and
  ``α = sqrt(B / examples through the node)``. (The indicator is an unbiased sample of the
  full-tree ``p_i``; it is what actually multiplies ``g_i`` in the sampled gradient, and the
  variance argument is about the gradient actually taken.)

The mean square is clamped below at ``floor²`` (the routing probability floor), so that
``α ≤ 1/floor`` even where float32 path probabilities underflow. The scaled gradient itself
stays bounded anyway: ``|Σ p_i g_i| / sqrt(B Σ p_i²) ≤ sqrt(Σ g_i² / B)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from routing_rl.core.graph import RoutedNet


def talr_scales(
    reach: torch.Tensor, floor: float, mean: Callable[[torch.Tensor], torch.Tensor] | None = None
) -> torch.Tensor:
    """``(N,)`` factors ``1/sqrt(max(mean_i p_i², floor²))`` from reach probabilities ``(B, N)``.

    ``mean`` averages ``(B, N)`` over the batch (default ``mean(0)``); data-parallel training
    passes one over the global batch, so that the norm is the global batch's.
    """
    squares = reach.detach().to(torch.float64).square()
    mean_square = squares.mean(0) if mean is None else mean(squares)
    return mean_square.clamp_min(floor**2).rsqrt()


class NodeGradients:
    """The parameters of each node of ``net`` (transform and router), in ``net.order``."""

    def __init__(self, net: RoutedNet):
        self.params = [[p for p in net.nodes[name].parameters() if p.requires_grad] for name in net.order]

    def scale(self, scales: torch.Tensor) -> None:
        """Multiply every gradient of node ``k`` by ``scales[k]``; nodes without gradients
        (not reached this step) are skipped."""
        scales = scales.tolist()
        for params, factor in zip(self.params, scales):
            grads = [p.grad for p in params if p.grad is not None]
            if grads and factor != 1.0:
                torch._foreach_mul_(grads, factor)
