"""Will a run fit in memory? Its footprint, estimated before anything is allocated.

The net is built at width 1 and run on one example; every layer's channel count grows
linearly with ``--width``, so parameters grow at most with its square and one example's
activations linearly, which bounds a wide net without allocating it. Training
keeps, per parameter, the weight, its gradient and SGD's momentum, and per example the
input, its augmented copy and every layer's output with its gradient. A run whose estimate
exceeds the device's free memory is refused with sizes that would fit, rather than dying
in the allocator (or under the kernel's OOM killer) mid-run. An SB3 agent's policy is sized
from the policy itself, built on the meta device (:func:`training_bytes`). On the CPU the
free memory is capped by the process's address-space limit (``ulimit -v``) where one is set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import resource
except ImportError:  # Windows: no address-space cap to read
    resource = None

from routing_rl.core.graph import RoutedNet
from routing_rl.training.config import TrainConfig

FLOAT_BYTES = 4
SUGGESTION_SHARE = 0.5
"""Suggested sizes fill at most this share of the free memory: the estimate is rough, and
the machine has other users."""


@dataclass(frozen=True)
class MemoryEstimate:
    """What training needs, from the net at width 1: ``parameters``, ``outputs`` (the
    values every layer outputs for one example) and ``inputs`` (values of one input)."""

    parameters: int
    outputs: int
    inputs: int

    def fixed(self, width: int) -> int:
        """Bytes of weights, gradients and momentum at ``width``."""
        return 3 * FLOAT_BYTES * self.parameters * width**2

    def per_example(self, width: int) -> int:
        """Bytes per example: input, augmented input, layer outputs and their gradients."""
        return FLOAT_BYTES * (2 * self.inputs + 2 * self.outputs * width)

    def total(self, width: int, batch_size: int) -> int:
        return self.fixed(width) + self.per_example(width) * batch_size


def estimate(build_net: Callable[[int], RoutedNet], dynamic_k_cpt: bool = False) -> MemoryEstimate:
    """The :class:`MemoryEstimate` of the net ``build_net(width)`` builds, from width 1."""
    net = build_net(1)
    outputs: list[int] = []

    def count(module, inputs, output) -> None:
        if isinstance(output, torch.Tensor):
            outputs.append(output.numel())

    hooks = [m.register_forward_hook(count) for m in net.modules() if not list(m.children())]
    with torch.no_grad():
        net(torch.zeros(1, *net.input_shape), torch.zeros(1) if dynamic_k_cpt else None)
    for hook in hooks:
        hook.remove()
    return MemoryEstimate(sum(p.numel() for p in net.parameters()), sum(outputs), math.prod(net.input_shape))


def available_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` (CUDA: free device memory; CPU: the kernel's MemAvailable, or
    less where the process's address space is capped, ``ulimit -v``: the cap less what the
    process maps already), None where it cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    free = _proc_kib("/proc/meminfo", "MemAvailable:")
    cap = resource.getrlimit(resource.RLIMIT_AS)[0] if resource is not None else None
    mapped = _proc_kib("/proc/self/status", "VmSize:")
    if cap not in (None, getattr(resource, "RLIM_INFINITY", None)) and mapped is not None:
        free = min(free if free is not None else cap, max(cap - mapped, 0))
    return free


def _proc_kib(path: str, field: str) -> int | None:
    """Bytes in the ``field`` line (in kB) of a /proc file; None without one."""
    path = Path(path)
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return None


def training_bytes(module: torch.nn.Module, trained: Iterable[torch.nn.Parameter], batch_size: int) -> int:
    """Bytes that training ``module``, a multilayer perceptron (built on the meta device, so
    that sizing it allocates nothing), takes on batches of ``batch_size``: every parameter's
    value; for each ``trained`` one (its optimiser's) a gradient and two values of optimiser
    state (Adam's moments; RMSprop and momentum SGD keep fewer), and once the largest of them
    again (the optimiser's step works tensor by tensor, through temporaries); per example,
    each linear layer's output and its activation, with their gradients."""
    trained = list(trained)
    outputs = sum(m.out_features for m in module.modules() if isinstance(m, torch.nn.Linear))
    values = (sum(p.numel() for p in module.parameters()) + 3 * sum(p.numel() for p in trained)
              + max((p.numel() for p in trained), default=0))
    return FLOAT_BYTES * (values + 4 * outputs * batch_size)


def check_fits(config: TrainConfig, build_net: Callable[[int], RoutedNet], device: torch.device, resident: int = 0,
               batch_size: int | None = None, flag: str = "--batch-size") -> None:
    """Raise MemoryError, saying what would fit, when ``config``'s run of the net
    ``build_net(width)`` cannot fit on ``device``; ``resident``: bytes the run keeps there
    besides the net and the batch (its training split). ``batch_size`` (default:
    ``config.batch_size``) examples at once, set by the flag ``flag``: also the examples in
    flight of an SB3 agent's vector env (``--n-envs``) or the batch a latency profile times
    (``--latency-batch``; counted with gradients, so an upper bound)."""
    free = available_bytes(device)
    if free is None:
        return
    free -= resident
    need = estimate(build_net, config.dynamic_k_cpt)
    width = config.width
    batch_size = config.batch_size if batch_size is None else batch_size
    if need.total(width, batch_size) <= free:
        return
    gib = 2**30
    what = (f"out of memory: --arch {config.arch} --width {width} {flag} {batch_size} needs about "
            f"{need.total(width, batch_size) / gib:.3g} GiB to train, but {device} has {free / gib:.3g} GiB free"
            + (f" besides the {resident / gib:.3g} GiB training split" if resident else ""))
    room = int(free * SUGGESTION_SHARE)
    if need.total(width, 1) <= room:
        raise MemoryError(f"{what}; lower {flag} to at most {(room - need.fixed(width)) // need.per_example(width)}")
    widest = 0
    for step in (2**k for k in reversed(range(width.bit_length()))):  # the widest width that fits this batch
        if widest + step < width and need.total(widest + step, batch_size) <= room:
            widest += step
    if widest:
        raise MemoryError(f"{what}; lower --width to at most {widest}")
    raise MemoryError(f"{what}; lower --width to 1 and {flag} to at most {(room - need.fixed(1)) // need.per_example(1)}")
