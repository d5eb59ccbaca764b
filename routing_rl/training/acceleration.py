"""Faster training steps with the same results up to float rounding: ``--channels-last``,
``--compile`` and ``--cuda-graphs`` (machine settings: a resumed run may switch them).

* ``channels_last``: convolution weights in channels-last (NHWC) memory format, so every
  activation follows. The multiscale columns already put their maps in channels-last on the
  CPU, so there it adds little.
* ``compile``: ``torch.compile`` of the full evaluation (``net.forward``, what the static,
  actor and full-tree critic steps run): batch norm, ReLU, additions and pooling of the
  forward and backward passes become fused generated kernels (C++ on the CPU, Triton on
  CUDA); the convolutions, most of a step on a CPU, stay library calls. The first step
  compiles (tens of seconds on a small CPU, once per process). Routed execution (sampled critics, evaluation)
  runs nodes on sub-batches whose size changes every call and stays eager.
* ``cuda_graphs`` (CUDA only): the compiled full evaluation in ``torch.compile``'s
  ``reduce-overhead`` mode, which records it as CUDA graphs and replays them: one launch per
  forward and per backward instead of hundreds. The paper's nets are small, so a step on a
  GPU is bound by the host launching kernels, not by the GPU computing them. The trainer
  marks where each step begins (:func:`begin_step`), so a step's graph outputs are reused by
  the next one only after the step has read them.

Parameters, state dicts and checkpoints are the same with and without any of these options. What
they give on CPUs and GPUs (``benchmarks/run.py --only learners``): ``docs/results/speed.md``.

``--precision bf16`` is not a machine setting but part of the run: its training steps run
under bf16 autocast (:func:`precision_context`), convolutions and matrix products in bfloat16,
reductions, losses and the weights in float32. It changes results beyond float rounding, so a
resumed run keeps it; evaluation, batch-norm recalibration and checkpoints stay float32. It
pays on CUDA and on CPUs that compute bf16 natively (AVX512-BF16 or AMX); elsewhere bf16 is
emulated and slower than float32, and the option is refused.

Every run also flushes subnormal floats to zero on the CPU (:func:`flush_denormals`): no
option, since what subnormals carry is below the float32 weights' rounding (a run resumed with
and without it ended with the same weights bit for bit: ``docs/results/speed.md``).
"""

from __future__ import annotations

import contextlib
import shutil

import torch

from routing_rl.core.graph import RoutedNet


def accelerate(net: RoutedNet, channels_last: bool = False, compile: bool = False, cuda_graphs: bool = False) -> RoutedNet:
    """Apply the options to ``net`` in place (on its device) and return it; ``cuda_graphs``
    implies ``compile``."""
    device = net.leaf_macs.device
    if cuda_graphs:
        check_cuda_graphs(device)
    if channels_last:
        net.to(memory_format=torch.channels_last)
    if compile or cuda_graphs:
        reason = compiler_missing(device)
        if reason:
            flag = "--cuda-graphs" if cuda_graphs else "--compile"
            raise RuntimeError(f"{flag} needs a compiler toolchain: {reason}; drop {flag}")
        net.compile(mode="reduce-overhead" if cuda_graphs else None)
    return net


def flush_denormals() -> None:
    """Have the CPU's float arithmetic treat subnormal numbers (magnitudes under 1.2e-38 in
    float32) as zero, in this thread and the intra-op threads it starts from now on.

    x86 CPUs compute with subnormals through microcode assists, dozens of times slower per
    operation. A router sure of its choice makes them by the tensor: the actor weighs each
    deep head's loss by its path's probability, and once a high-k_cpt actor's routers exit
    early that probability is tiny, so the whole backward pass through the deep columns runs
    on subnormals (a step 5× slower, ``benchmarks/bench_learners.py``
    ``actor_sure_routers_flush_speedup``). What they carry is far below the rounding of the
    float32 weights they update. Call it before the first multi-threaded operation: threads
    already started keep their own setting. GPUs compute subnormals at full speed."""
    torch.set_flush_denormal(True)


def check_cuda_graphs(device: torch.device) -> None:
    """Refuse ``--cuda-graphs`` where there are no CUDA graphs to replay."""
    if device.type != "cuda":
        raise RuntimeError(f"--cuda-graphs replays the training step as CUDA graphs and needs a CUDA device; this run "
                           f"trains on {device.type}: drop --cuda-graphs (--compile compiles the step on any device)")


def begin_step(cuda_graphs: bool) -> None:
    """Call before each training step. With ``cuda_graphs``, tells torch's CUDA graph trees
    that a new step begins, so they may overwrite the last step's graph outputs. Their own
    guess (a new step at each compiled call with no backward pending) depends on what a
    learner's step calls; the mark does not."""
    if cuda_graphs:
        torch.compiler.cudagraph_mark_step_begin()


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


PRECISIONS = ("float32", "bf16")


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 natively: CUDA, or a CPU whose oneDNN has AVX512-BF16 or AMX."""
    if device.type == "cuda":
        return True
    if device.type != "cpu":
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def precision_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The context a training step runs in: nothing for float32, bf16 autocast for bf16."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    if precision == "float32":
        return contextlib.nullcontext()
    if not native_bf16(device):
        raise RuntimeError(f"--precision bf16 needs a device that computes bf16 natively (CUDA, or a CPU with "
                           f"AVX512-BF16 or AMX); on this {device.type} it is emulated and slower than float32: "
                           "drop --precision bf16")
    return torch.autocast(device.type, dtype=torch.bfloat16)
