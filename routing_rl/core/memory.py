"""CPU memory: let the C allocator keep freed activations for the next batch.

On Linux, glibc's ``malloc`` serves every block above its *mmap threshold* (adjusted as the
program runs, at most 32 MiB) with a fresh ``mmap`` and returns it to the kernel on ``free``.
The kernel then zero-fills each page of the next such block on first touch. One scale of a
column's pyramid at batch 1024 is 64 MiB (16 channels × 32 × 32 × 4 bytes × 1024), so a
large-batch forward pass on the CPU pays a page fault per 4 KiB of every activation it
writes: at batch 1024 this made dynamic execution and full evaluation 1.6–2.2× slower
(``benchmarks/bench_execution.py`` measures it, ``allocator_default``). Raising both
thresholds makes freed blocks stay in the process, ready for the next pass, as the CUDA
caching allocator does on the GPU.
"""

from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
RETAINED_BLOCK_BYTES = 1 << 30
"""Blocks up to 1 GiB come from (and return to) the process's heap."""

_retained = False


def retain_freed_memory(max_block_bytes: int = RETAINED_BLOCK_BYTES) -> bool:
    """Keep freed blocks up to ``max_block_bytes`` in the process instead of returning them.

    Process-wide and lasting: the resident memory then stays at its peak. Applied by the
    command-line tools, the benchmarks and the first routed execution on the CPU
    (:func:`retain_by_default`).
    Returns whether it took effect: True under glibc (Linux), False elsewhere, where the C
    allocator has no such thresholds to raise.
    """
    global _retained
    if _retained:
        return True
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    _retained = bool(mallopt(M_MMAP_THRESHOLD, max_block_bytes)) and bool(mallopt(M_TRIM_THRESHOLD, max_block_bytes))
    return _retained


def release_freed_memory() -> bool:
    """Hand the freed blocks :func:`retain_freed_memory` kept back to the system (glibc's
    ``malloc_trim``): what a command-line tool calls once its work is done, so that what
    follows does not add to a resident memory still at its peak — a CUDA build of torch
    pages in ~130 MB of its libraries' code when they are unloaded at exit.
    Returns whether memory was released (False where the C library has no ``malloc_trim``)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return malloc_trim is not None and bool(malloc_trim(ctypes.c_size_t(0)))


OPT_OUT = "ROUTING_RL_RETAIN_FREED_MEMORY"
"""Set to ``0`` to keep the C allocator's defaults in a process that routes on the CPU."""
_asked = False


def retain_by_default() -> None:
    """:func:`retain_freed_memory` once per process, unless ``$ROUTING_RL_RETAIN_FREED_MEMORY``
    is ``0``: what :func:`~routing_rl.core.execution.route` calls on a CPU batch, so that a
    library user's inference gets the same fast path as the command-line tools."""
    global _asked
    if _asked:
        return
    _asked = True
    if os.environ.get(OPT_OUT, "1") != "0":
        retain_freed_memory()
