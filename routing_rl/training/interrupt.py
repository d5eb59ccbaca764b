"""Ctrl-C and SIGTERM: a training loop stops between two steps, never inside one.

While :func:`handling_signals` is active (the command line holds it for the whole run),
SIGINT and SIGTERM raise :class:`Interrupted` where the program is, as Ctrl-C does; inside
:func:`stop_between_steps` (the training loops) they only set a flag, which the loop reads
between steps (:func:`stop_requested`): it checkpoints the state after its last completed
step and raises :class:`Interrupted` itself, so the checkpoint never holds half a step.

The first signal decides; any later one (a second Ctrl-C 20 ms after the first) is ignored,
so the checkpoint being written is finished and the exit stays one line.
``Interrupted.exit_code`` is the shell's ``128 + signal``: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """Training was stopped by ``signum``; ``iteration``: the completed iterations saved in
    the checkpoint written on the way out (None: the stop came outside a training loop)."""

    def __init__(self, signum: int = signal.SIGINT, iteration: int | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.iteration = int(signum), iteration

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    signum: int | None = None  # the first signal received
    deferring = 0  # > 0: inside a loop that stops between steps


_state = _State()


def _on_signal(signum: int, frame) -> None:
    if _state.signum is not None:  # a stop is under way: let it finish
        return
    _state.signum = signum
    if not _state.deferring:
        raise Interrupted(signum)


@contextmanager
def handling_signals(leaving: bool = False) -> Iterator[None]:
    """SIGINT and SIGTERM handled as this module says until the block ends, then each as it was
    found again: ignored (as a non-interactive shell starts a job with ``&``), default,
    Python's Ctrl-C or another function; ``leaving`` (the process exits after the block):
    ignored from then on. A signal whose handler was installed outside Python, which Python
    cannot report and so could not put back, is left alone. Outside the main thread, where
    Python delivers no signals, it does nothing."""
    if threading.current_thread() is not threading.main_thread() or any(
            signal.getsignal(signum) is _on_signal for signum in SIGNALS):
        yield
        return
    previous = {signum: handler for signum in SIGNALS if (handler := signal.getsignal(signum)) is not None}
    _state.signum, _state.deferring = None, 0
    for signum in previous:
        signal.signal(signum, _on_signal)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if leaving else handler)
        _state.signum, _state.deferring = None, 0


@contextmanager
def stop_between_steps() -> Iterator[None]:
    """Signals only request a stop while the block runs (handled as :func:`handling_signals`
    says, installed for the block if they are not yet)."""
    with handling_signals():
        _state.deferring += 1
        try:
            yield
        finally:
            _state.deferring -= 1


def stop_requested() -> int | None:
    """The signal that asked for a stop (a true value), or None."""
    return _state.signum


def request_stop(signum: int = signal.SIGINT) -> None:
    """What a signal does inside :func:`stop_between_steps`, without one (hooks and tests)."""
    if _state.signum is None:
        _state.signum = int(signum)
