"""Rows of a memory-mapped tensor, copied without keeping the file's pages resident.

The cache's datasets are memory-mapped (:func:`routing_rl.data.cache.load_entry`): a row
read from one maps the file's pages around it into the process, and on a kernel that keeps
files in the page cache as large folios (ext4, XFS; transparent huge pages ``always``) a
fault maps a whole folio, up to 2 MiB. 64 random 12 KiB hybrid images then added 101 MiB to
the resident memory, 640 of them the whole 350 MiB file, for as long as the dataset lived:
a smoke run's validation and test parts, or a video task's clips, cost as much memory as
the whole dataset. :func:`take_rows` copies a few rows at a time and unmaps the file's pages
after each few (``madvise(MADV_DONTNEED)``): they stay in the page cache, shared with every
other process, and are mapped again when read again.
"""

from __future__ import annotations

import ctypes
import mmap
import platform

import torch

ROWS_PER_RELEASE = 16
"""Rows copied between two releases: at most this many folios (32 MiB) mapped at once."""

MADV_DONTNEED = 4
_PAGE = mmap.PAGESIZE


def _madvise():
    if platform.system() != "Linux":
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "madvise", None)
    if function is not None:
        function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return function


_MADVISE = _madvise()


def clean_file_mapping(start: int, end: int) -> tuple[int, int] | None:
    """``(low, high)`` addresses of the mapping of the process that holds ``[start, end)``
    when it maps a file privately and none of its pages was written by the process (no
    copied-on-write page: ``Anonymous`` 0), else None: only such pages can be dropped and
    read back unchanged from the file (or from the page cache, before it is written back)."""
    try:
        with open("/proc/self/smaps") as smaps:
            block = None
            for line in smaps:
                head = line.split(maxsplit=5)
                if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
                    low, high = (int(x, 16) for x in head[0].split("-"))
                    block = (low, high, head[1], int(head[4]), len(head) == 6) if low <= start and end <= high else None
                elif block is not None and head[0] == "Anonymous:":
                    low, high, permissions, inode, named = block
                    if permissions.endswith("p") and inode != 0 and named and int(head[1]) == 0:
                        return low, high
                    return None
    except OSError:
        return None
    return None


def take_rows(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``tensor.index_select(0, indices)`` (a new tensor, ``indices`` a 1-D long tensor).

    For a contiguous CPU tensor that maps a file unchanged (a dataset loaded from the cache),
    the rows are copied :data:`ROWS_PER_RELEASE` at a time and the file's pages unmapped from
    the process after each (see the module docstring); any other tensor is indexed at once.
    """
    indices = torch.as_tensor(indices, dtype=torch.long, device=tensor.device)
    size = tensor.numel() * tensor.element_size()
    if (_MADVISE is None or tensor.device.type != "cpu" or not tensor.is_contiguous() or tensor.dim() == 0
            or size == 0 or len(indices) <= ROWS_PER_RELEASE):
        return tensor.index_select(0, indices)
    start = tensor.data_ptr()
    mapping = clean_file_mapping(start, start + size)
    if mapping is None:
        return tensor.index_select(0, indices)
    # whole pages only: those around the tensor belong to the same unchanged file mapping
    low = max(mapping[0], start // _PAGE * _PAGE)
    high = min(mapping[1], -(-(start + size) // _PAGE) * _PAGE)
    out = torch.empty((len(indices), *tensor.shape[1:]), dtype=tensor.dtype)
    for first in range(0, len(indices), ROWS_PER_RELEASE):
        torch.index_select(tensor, 0, indices[first : first + ROWS_PER_RELEASE], out=out[first : first + ROWS_PER_RELEASE])
        _MADVISE(low, high - low, MADV_DONTNEED)
    return out
