"""Will a run fit in memory? An estimate made before anything is allocated.

The net is built at width 1 and run on one example; every layer's channel count grows
linearly with ``--width``, so parameters grow at most with its square and one example's
activations linearly, which bounds a wide net without allocating it. Training
keeps, per parameter, the weight, its gradient and SGD's momentum, and per example the
input, its augmented copy and every layer's output with its gradient. A run whose estimate
exceeds the device's free memory is refused with sizes that would fit, rather than dying
in the allocator (or under the kernel's OOM killer) mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from routing_rl.nets.multiscale import build
from routing_rl.training.config import TrainConfig

FLOAT_BYTES = 4
INPUT_SHAPE = (3, 32, 32)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a training run needs: ``fixed`` (parameters, gradients, momentum) plus
    ``per_example`` × batch size."""

    fixed: int
    per_example: int

    def total(self, batch_size: int) -> int:
        return self.fixed + self.per_example * batch_size


def estimate(config: TrainConfig, classes: int) -> MemoryEstimate:
    """The memory :class:`MemoryEstimate` of training ``config``'s net (already validated)."""
    net = build(config.arch, 1, classes, k_cpt_input=config.dynamic_k_cpt)
    outputs: list[int] = []

    def count(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            outputs.append(output.numel())

    hooks = [m.register_forward_hook(count) for m in net.modules() if not list(m.children())]
    with torch.no_grad():
        net(torch.zeros(1, *INPUT_SHAPE), torch.zeros(1) if config.dynamic_k_cpt else None)
    for hook in hooks:
        hook.remove()
    parameters = sum(p.numel() for p in net.parameters()) * config.width**2
    per_example = 2 * torch.Size(INPUT_SHAPE).numel() + 2 * sum(outputs) * config.width
    return MemoryEstimate(3 * parameters * FLOAT_BYTES, per_example * FLOAT_BYTES)


def available_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` (CUDA: free device memory; CPU: the kernel's MemAvailable),
    None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    meminfo = Path("/proc/meminfo")
    if device.type == "cpu" and meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def check_fits(config: TrainConfig, classes: int, device: torch.device) -> None:
    """Raise MemoryError, saying what would fit, when the run cannot fit on ``device``."""
    free = available_bytes(device)
    if free is None:
        return
    need = estimate(config, classes)
    if need.total(config.batch_size) <= free:
        return
    gib = 2**30
    what = (f"out of memory: --arch {config.arch} --width {config.width} --batch-size {config.batch_size} needs "
            f"about {need.total(config.batch_size) / gib:.3g} GiB to train, but {device} has {free / gib:.3g} GiB free")
    if need.fixed + need.per_example <= free:
        largest = (free - need.fixed) // need.per_example
        raise MemoryError(f"{what}; lower --batch-size to at most {largest}")
    raise MemoryError(f"{what}; its parameters alone need {need.fixed / gib:.3g} GiB: lower --width (default 1)")
