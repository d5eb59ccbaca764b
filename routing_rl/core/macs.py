"""Counting multiply-accumulates (MACs) per example.

The counting rules follow the paper's cost model: a convolution costs
``output elements × kernel volume × input channels / groups`` MACs (so a depthwise
convolution, ``groups = channels``, costs ``output elements × kernel volume``), a transposed
convolution ``input elements × kernel volume × output channels / groups``, a linear layer
``output elements × input features``, and ``nn.MultiheadAttention`` its four projections plus
``2 × query length × key length × embedding`` for the scores and the weighted sum. Pooling
(adaptive or not), batch and layer norm, activations (ReLU, hardswish, sigmoid, ...),
elementwise products (a squeeze-excitation's scaling), additions and biases cost nothing.
Counts are per example: the batch dimension is divided out.

Counting works on any ``nn.Module`` built from those layers: forward hooks watch them while
the module runs on an example input (a torchvision model, or a torch.fx graph of one, calls
its layers as modules). A module that does other multiply-heavy work (a functional
convolution, recurrences) declares it by defining ``extra_macs(inputs, output) -> int`` (per
example); the counter calls it as a hook too.
"""

from __future__ import annotations

import torch
from torch import nn


COUNTED = (nn.modules.conv._ConvNd, nn.Linear, nn.MultiheadAttention)
"""The layer types with a MAC rule (:func:`layer_macs`)."""


def layer_macs(module: nn.Module, output, inputs: tuple = ()) -> int:
    """MACs per example of one convolution, linear or attention layer, given its output
    (and its positional inputs: a transposed convolution's and attention's rules read them)."""
    if isinstance(module, nn.MultiheadAttention):
        return attention_macs(module, inputs)
    per_example_outputs = output.numel() // output.shape[0]
    if isinstance(module, nn.modules.conv._ConvNd):
        kernel_volume = 1
        for size in module.kernel_size:
            kernel_volume *= size
        if module.transposed:  # every input element is spread over a kernel of every output channel
            per_example_inputs = inputs[0].numel() // inputs[0].shape[0]
            return per_example_inputs * kernel_volume * (module.out_channels // module.groups)
        return per_example_outputs * kernel_volume * (module.in_channels // module.groups)
    if isinstance(module, nn.Linear):
        return per_example_outputs * module.in_features
    raise TypeError(f"no MAC rule for {type(module).__name__}")


def attention_macs(module: nn.MultiheadAttention, inputs: tuple) -> int:
    """Per example: the query, key, value and output projections, and
    ``2 × L_query × L_key × embed_dim`` for the attention scores and their weighted sum.
    ``inputs``: ``(query, key, value)``, batched as the module says (``batch_first``)."""
    query, key = inputs[0], inputs[1]
    sequence = 1 if module.batch_first else 0
    queries = query.shape[sequence] if query.dim() == 3 else query.shape[0]
    keys = key.shape[sequence] if key.dim() == 3 else key.shape[0]
    embed = module.embed_dim
    projections = queries * embed * embed + keys * (module.kdim + module.vdim) * embed + queries * embed * embed
    return projections + 2 * queries * keys * embed


class MacCounter:
    """Context manager that sums the per-example MACs of every layer run inside ``module``.

    >>> with MacCounter(column) as counter:
    ...     column(example)
    >>> counter.macs
    """

    def __init__(self, module: nn.Module):
        self.module = module
        self.macs = 0
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, module: nn.Module, inputs, output) -> None:
        extra = getattr(module, "extra_macs", None)
        if extra is not None:
            self.macs += int(extra(inputs, output))
        if isinstance(module, COUNTED):
            self.macs += layer_macs(module, output, inputs)

    def __enter__(self) -> MacCounter:
        for sub in self.module.modules():
            if isinstance(sub, COUNTED) or hasattr(sub, "extra_macs"):
                self._handles.append(sub.register_forward_hook(self._hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
