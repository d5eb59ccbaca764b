"""Eval-mode batch norm folded into the layer before it, for inference.

In eval mode batch norm is a fixed per-channel affine map, ``x × scale + shift``, so the
convolution or linear layer before it can absorb it: one pass over the activations instead
of two, and at small batches one tensor operation instead of two (each costing more in
dispatch than in arithmetic). Nets use folded weights only in eval mode without gradients,
when no hook watches their layers; the weights are refolded whenever one of the tensors
they derive from changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn


def norm_affine(norm: nn.modules.batchnorm._BatchNorm) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)``, each ``(C,)``: eval-mode ``norm(x)`` is ``x × scale + shift`` per channel."""
    scale = norm.weight / torch.sqrt(norm.running_var + norm.eps)
    return scale, norm.bias - norm.running_mean * scale


def norm_tensors(norm: nn.modules.batchnorm._BatchNorm) -> list[torch.Tensor]:
    return [norm._parameters["weight"], norm._parameters["bias"], norm._buffers["running_mean"], norm._buffers["running_var"]]


def use_folded(module: nn.Module, layers: Sequence[nn.Module]) -> bool:
    """Whether ``module`` may run on folded weights: eval mode, no gradients, no hooks on
    ``layers``, and not inside ``torch.compile`` (which traces the plain layers instead)."""
    if module.training or torch.is_grad_enabled() or torch.compiler.is_compiling():
        return False
    return not any(layer._forward_hooks or layer._forward_pre_hooks for layer in layers)


class FoldCache:
    """Holds folded tensors, recomputed whenever a source tensor was replaced or changed in
    place (optimiser steps, ``load_state_dict``, ``.to()``; not writes through ``.data``,
    which bypass PyTorch's version counters)."""

    def __init__(self):
        self.key: list[tuple[int, int]] | None = None
        self.value = None
        self.sources: list[torch.Tensor] = []

    def get(self, sources: list[torch.Tensor], fold: Callable[[], object]):
        key = [(t.data_ptr(), t._version) for t in sources]
        if key != self.key:
            with torch.no_grad():
                self.value = fold()
            # keeping the sources alive keeps their addresses from being reused by new tensors
            self.key, self.sources = key, sources
        return self.value
