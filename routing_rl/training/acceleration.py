"""Faster training steps with the same results up to float rounding: ``--channels-last`` and
``--compile`` (machine settings: a resumed run may switch them).

* ``channels_last``: convolution weights in channels-last (NHWC) memory format, so every
  activation follows. The multiscale columns already put their maps in channels-last on the
  CPU, so there it adds little.
* ``compile``: ``torch.compile`` of the full evaluation (``net.forward``, what the static,
  actor and full-tree critic steps run): batch norm, ReLU, additions and pooling of the
  forward and backward passes become fused generated kernels (C++ on the CPU, Triton on
  CUDA); the convolutions, most of a step on a CPU, stay library calls. The first step
  compiles (tens of seconds on a small CPU, once per process). Routed execution (sampled critics, evaluation)
  runs nodes on sub-batches whose size changes every call and stays eager.

Parameters, state dicts and checkpoints are the same with and without either option. What
they give on CPUs and GPUs (``benchmarks/run.py --only learners``): ``docs/results/speed.md``.
"""

from __future__ import annotations

import shutil

import torch

from routing_rl.core.graph import RoutedNet


def accelerate(net: RoutedNet, channels_last: bool = False, compile: bool = False) -> RoutedNet:
    """Apply the options to ``net`` in place (on its device) and return it."""
    if channels_last:
        net.to(memory_format=torch.channels_last)
    if compile:
        reason = compiler_missing(net.leaf_macs.device)
        if reason:
            raise RuntimeError(f"--compile needs a compiler toolchain: {reason}; drop --compile")
        net.compile()
    return net


def compiler_missing(device: torch.device) -> str | None:
    """Why ``torch.compile``'s default backend cannot build kernels for ``device``, or None."""
    if device.type == "cpu" and not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return "no C++ compiler (g++, c++ or clang++) on PATH"
    if device.type == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton is not installed"
    return None
