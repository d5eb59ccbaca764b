"""Eval-mode batch norm folded into the layer before it, for inference.

In eval mode batch norm is a fixed per-channel affine map, ``x × scale + shift``, so the
convolution or linear layer before it can absorb it: one pass over the activations instead
of two, and at small batches one tensor operation instead of two (each costing more in
dispatch than in arithmetic). Nets use folded weights only in eval mode without gradients,
when no hook watches their layers (see :class:`Foldable`).
"""

from __future__ import annotations

from collections.abc import Sequence

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


class Foldable(nn.Module):
    """A module that runs on folded weights for inference, kept in a cache.

    Subclasses define ``_fold_sources()`` (the tensors the folded ones derive from) and
    ``_fold()`` (the folded tensors), and call ``self._folded()`` when :func:`use_folded`
    allows. The cache is refolded after ``.to()`` and ``load_state_dict`` (which may replace
    tensors) and after any change in place (optimiser steps, ``copy_`` under ``no_grad``),
    which raises the sum of the sources' version counters; not after writes through
    ``.data`` or the assignment of new tensors to a layer, which those counters do not see.
    """

    def __init__(self):
        super().__init__()
        self._fold_cache: tuple[list[torch.Tensor], int, object] | None = None

    def _fold_sources(self) -> list[torch.Tensor]:
        raise NotImplementedError

    def _fold(self):
        raise NotImplementedError

    def _folded(self):
        cache = self._fold_cache
        if cache is not None and sum(t._version for t in cache[0]) == cache[1]:
            return cache[2]
        sources = self._fold_sources()
        with torch.no_grad():
            folded = self._fold()
        self._fold_cache = (sources, sum(t._version for t in sources), folded)
        return folded

    def _apply(self, fn, *args, **kwargs):
        self._fold_cache = None
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        self._fold_cache = None
        super()._load_from_state_dict(*args, **kwargs)
