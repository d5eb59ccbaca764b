"""Counting multiply-accumulates (MACs) per example.

The counting rules follow the paper's cost model: a convolution costs
``output elements × kernel volume × input channels / groups`` MACs and a linear layer
``output elements × input features``; pooling, batch norm, activations and biases cost
nothing. Counts are per example: the batch dimension is divided out.

Counting works on any ``nn.Module`` built from ``nn.Conv1d/2d/3d`` and ``nn.Linear``:
forward hooks watch those layers while the module runs on an example input. A module
that does other multiply-heavy work (attention, recurrences) declares it by defining
``extra_macs(inputs, output) -> int`` (per example); the counter calls it as a hook too.
"""

from __future__ import annotations

import torch
from torch import nn


def layer_macs(module: nn.Module, output: torch.Tensor) -> int:
    """MACs per example of one convolution or linear layer, given its output."""
    per_example_outputs = output.numel() // output.shape[0]
    if isinstance(module, nn.modules.conv._ConvNd):
        kernel_volume = 1
        for size in module.kernel_size:
            kernel_volume *= size
        return per_example_outputs * kernel_volume * (module.in_channels // module.groups)
    if isinstance(module, nn.Linear):
        return per_example_outputs * module.in_features
    raise TypeError(f"no MAC rule for {type(module).__name__}")


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
        if isinstance(module, (nn.modules.conv._ConvNd, nn.Linear)):
            self.macs += layer_macs(module, output)

    def __enter__(self) -> MacCounter:
        for sub in self.module.modules():
            if isinstance(sub, (nn.modules.conv._ConvNd, nn.Linear)) or hasattr(sub, "extra_macs"):
                self._handles.append(sub.register_forward_hook(self._hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
