"""Seeded torch generators that keep every bit of a seed: the one place a generator is seeded.

torch's CPU generator (a Mersenne Twister) keeps only the low 32 bits of ``manual_seed``, so
seeds ``s`` and ``s + 2**32`` would give bit-identical runs. Here a seed below 2**32 seeds it
exactly as ``manual_seed`` does (runs of those seeds reproduce as they always have); a larger one
sets its state from both 32-bit words of the seed with MT19937's ``init_by_array``, the
reference way to seed it from more than 32 bits (NumPy's legacy generator computes it). CUDA's
generator (Philox) keeps 64 bits, so it is seeded directly.
"""

from __future__ import annotations

import numpy as np
import torch

SEED_LIMIT = 2**64
"""Seeds are integers in 0 ... 2**64 - 1 (a run's seed, plus the small offsets that give its
batch order, augmentation and routing samples generators of their own)."""
_WORD = 2**32
_MT_WORDS = slice(24, 24 + 624 * 8)
"""Where the 624 state words (one uint64 each) lie in torch's CPU generator state: after the
initial seed (uint64), ``left`` and ``seeded`` (int32 each) and ``next`` (uint64)."""


def seed_generator(generator: torch.Generator, seed: int) -> torch.Generator:
    """``generator`` seeded from all the bits of ``seed``; returned, as ``manual_seed`` does."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"a seed must be an integer in 0 ... 2**64 - 1, got {seed!r}")
    if generator.device.type != "cpu" or seed < _WORD:
        return generator.manual_seed(seed)
    low = seed % _WORD
    generator.manual_seed(low)  # a freshly seeded state: no cached normal sample, a full twist due
    state = generator.get_state()
    words = state[_MT_WORDS].view(torch.int64)
    if not np.array_equal(words.numpy(), np.random.RandomState(low).get_state()[1]):
        raise RuntimeError(f"torch {torch.__version__} lays out its CPU generator's state in a way this package "
                           "does not know; seeds of 2**32 and more cannot be used with it")
    words.copy_(torch.from_numpy(np.random.RandomState([low, seed // _WORD]).get_state()[1].astype(np.int64)))
    state[:8].view(torch.int64).fill_(seed - SEED_LIMIT if seed >= 2**63 else seed)  # initial_seed() reads it back
    return generator.set_state(state)


def seeded_generator(seed: int, device: str | torch.device = "cpu") -> torch.Generator:
    """A new generator on ``device`` seeded by :func:`seed_generator`."""
    return seed_generator(torch.Generator(device=device), seed)


def manual_seed(seed: int) -> None:
    """``torch.manual_seed`` (every device's global generator), with the CPU's seeded from all
    the bits of ``seed`` (:func:`seed_generator`)."""
    torch.manual_seed(seed)
    seed_generator(torch.default_generator, seed)
