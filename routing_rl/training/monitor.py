"""TensorBoard logging and training progress, with one naming scheme for every learner.

Tags are namespaced and stepped by training iteration (environment step for SB3):
``losses/`` (c_err, c_cpt, c_mod, c_dec, c_ure, total), ``charts/`` (accuracies, mean MACs,
examples/s, lr, tau or epsilon), ``routing/`` (fraction of examples at each leaf, router
score histograms) and ``figures/`` (node-link diagrams).

Progress (:class:`Progress`, for the paper's learners and the SB3 agents alike) is a tqdm bar
on a terminal; where stderr is not one (``nohup``, CI, a notebook's log), or is one too small for
a bar (``script`` and some notebook shells report 0 columns), it is one line every
``$ROUTING_RL_PROGRESS_SECONDS`` seconds of wall time (default 30) and after each validation::

    progress actor chain | iteration 240/1200 (20%) | 1,210 images/s | loss 1.052 | val accuracy 88.40% (iteration 200) | elapsed 25s | ETA 1m41s
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm


def evaluation_scalars(evaluation: dict, prefix: str) -> dict[str, float]:
    """TensorBoard scalars for one evaluation: ``charts/{prefix}_accuracy``,
    ``charts/{prefix}_mean_macs``, ``charts/{prefix}_source_accuracy/<source>`` and
    ``routing/{prefix}_fraction/<leaf>``."""
    scalars = {
        f"charts/{prefix}_accuracy": evaluation["accuracy"],
        f"charts/{prefix}_mean_macs": evaluation["mean_macs"],
    }
    for source, accuracy in evaluation.get("source_accuracy", {}).items():
        scalars[f"charts/{prefix}_source_accuracy/{source}"] = accuracy
    for leaf, summary in evaluation["leaves"].items():
        scalars[f"routing/{prefix}_fraction/{leaf}"] = summary["fraction"]
    return scalars


def write_hparams(writer: SummaryWriter, hparams: Mapping[str, object], metrics: Mapping[str, float]) -> None:
    """TensorBoard's HPARAMS entry of a run, into ``writer``'s own events file: its settings
    ``hparams`` (values other than numbers, strings and booleans as text) and the scalars
    ``hparams/<metric>``."""
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    clean = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
    scalars = {f"hparams/{k}": float(v) for k, v in metrics.items()}
    for summary in hparams_summaries(clean, scalars):
        writer.file_writer.add_summary(summary)
    for tag, value in scalars.items():
        writer.add_scalar(tag, value)


HISTOGRAM_EXAMPLES = 512
"""Validation examples whose routing scores are drawn as histograms (``routing/scores/<junction>``)
at each evaluation."""

PROGRESS_SECONDS_ENV = "ROUTING_RL_PROGRESS_SECONDS"
DEFAULT_PROGRESS_SECONDS = 30.0
"""Wall-clock seconds between progress lines where stderr is not a terminal: often enough to
see a run is alive, rarely enough that a day-long log stays readable (about 3,000 lines)."""


def progress_seconds() -> float:
    """Seconds between progress lines: ``$ROUTING_RL_PROGRESS_SECONDS`` or 30. ValueError
    names a value that is not a positive number."""
    text = os.environ.get(PROGRESS_SECONDS_ENV)
    if text is None:
        return DEFAULT_PROGRESS_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"${PROGRESS_SECONDS_ENV} must be a positive number of seconds, got {text!r}; "
                         f"unset it for the default ({DEFAULT_PROGRESS_SECONDS:g})")
    return seconds


MIN_BAR_COLUMNS, MIN_BAR_LINES = 2, 3
"""The smallest terminal tqdm draws a bar on: below it (a pseudo-terminal reporting 0 columns or
0 lines) tqdm silently draws nothing, so the run prints line records instead."""


def draws_a_bar(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal that tqdm can draw a bar on: one that says it is a
    terminal and reports at least :data:`MIN_BAR_COLUMNS` x :data:`MIN_BAR_LINES` (or no size at
    all, where tqdm uses its own defaults)."""
    if not stream.isatty():
        return False
    try:  # the size tqdm itself reads (dynamic_ncols)
        columns, lines = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return True
    return columns >= MIN_BAR_COLUMNS and lines >= MIN_BAR_LINES


def duration(seconds: float) -> str:
    """``seconds`` as ``42s``, ``3m07s`` or ``2h05m``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """Progress of training over ``total`` iterations, from ``initial`` (a resumed run).

    On a terminal (:func:`draws_a_bar`), a tqdm bar. Elsewhere, one line on ``stream`` every ``interval`` seconds of
    wall time (None: :func:`progress_seconds`) and after each validation: the description,
    iteration/total, images per second since the previous line, the latest loss, the latest
    validation accuracy and the iteration it was measured at, elapsed time and ETA (the
    iterations left at this process's mean pace so far).

    Args:
        stream: where the bar or lines go (None: stderr, looked up when constructed).
        unit: what the lines count (an environment ``step`` where a budget is in steps).
    """

    def __init__(self, total: int, initial: int = 0, description: str = "train", interval: float | None = None,
                 stream: TextIO | None = None, unit: str = "iteration"):
        self.stream = sys.stderr if stream is None else stream
        self.terminal = draws_a_bar(self.stream)
        self.interval = progress_seconds() if interval is None else interval
        self.bar = tqdm(total=total, initial=initial, desc=description, unit="it", dynamic_ncols=True,
                        file=self.stream, disable=not self.terminal)
        self.total, self.initial, self.iteration, self.description = total, initial, initial, description
        self.unit = unit
        self.started = self.shown_at = time.monotonic()
        self.examples_since_shown, self.rate = 0, 0.0
        self.loss: float | None = None
        self.validation: tuple[float, int] | None = None  # (accuracy, iteration)

    def update(self, steps: int, examples: int, loss: float | None = None, **postfix: float) -> None:
        """``steps`` more iterations on ``examples`` images in all; ``loss`` the latest training
        loss; ``postfix`` more values for the terminal's bar."""
        self.iteration += steps
        self.examples_since_shown += examples
        if loss is not None:
            self.loss = float(loss)
        if self.terminal:
            self.bar.update(steps)
            shown = {"loss": self.loss, **postfix} if self.loss is not None else dict(postfix)
            if self.validation is not None:
                shown["val_accuracy"] = self.validation[0]
            if shown:
                self.bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        elif time.monotonic() - self.shown_at >= self.interval:
            self.show()

    def validated(self, accuracy: float, iteration: int) -> None:
        """A validation at ``iteration`` measured ``accuracy``: a line now (off a terminal)."""
        self.validation = (float(accuracy), iteration)
        if not self.terminal:  # the bar shows it with its next update
            self.show()

    def line(self) -> str:
        """The progress record as of now."""
        now = time.monotonic()
        if self.examples_since_shown:  # else (a validation right after a line) the previous line's rate
            self.rate = self.examples_since_shown / max(now - self.shown_at, 1e-9)
        fields = [f"progress {self.description}",
                  f"{self.unit} {self.iteration}/{self.total} ({self.iteration / max(self.total, 1):.0%})",
                  f"{self.rate:,.0f} images/s"]
        if self.loss is not None:
            fields.append(f"loss {self.loss:.4g}")
        if self.validation is not None:
            fields.append(f"val accuracy {self.validation[0]:.2%} (iteration {self.validation[1]})")
        done, elapsed = self.iteration - self.initial, now - self.started
        eta = duration(max(self.total - self.iteration, 0) * elapsed / done) if done > 0 else "unknown"
        fields += [f"elapsed {duration(elapsed)}", f"ETA {eta}"]
        return " | ".join(fields)

    def show(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self.shown_at, self.examples_since_shown = time.monotonic(), 0

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def writer_failures_in_training_thread() -> Iterator[None]:
    """While in the block, a TensorBoard writer thread whose write fails (a full disk) prints
    no traceback of its own: the writer raises that OSError again in the training thread at
    its next write or flush, where the run reports it in one line."""
    previous = threading.excepthook

    def hook(args) -> None:
        if not (isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith("tensorboard.")):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


class Monitor:
    """A TensorBoard writer into ``run_dir`` and the :class:`Progress` of the training
    iterations (a bar on a terminal, periodic lines elsewhere).

    A run resumed from its checkpoint at iteration ``initial`` asks TensorBoard to drop the
    events after ``initial`` that the interrupted process wrote past that checkpoint
    (``purge_step``), so no step is shown twice.
    """

    def __init__(self, run_dir: Path, total: int, initial: int = 0, description: str = "train"):
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=initial + 1 if initial else None)
        self.ticker = Progress(total, initial, description)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, float(value), step)

    def histograms(self, values: Mapping[str, torch.Tensor], step: int) -> None:
        for tag, tensor in values.items():
            if tensor.numel():
                self.writer.add_histogram(tag, tensor.detach().float().cpu(), step)

    def figure(self, tag: str, figure, step: int) -> None:
        self.writer.add_figure(tag, figure, step, close=True)

    def hparams(self, hparams: Mapping[str, object], metrics: Mapping[str, float]) -> None:
        """See :func:`write_hparams`."""
        write_hparams(self.writer, hparams, metrics)

    def progress(self, steps: int, examples: int, loss: float | None = None, **postfix: float) -> None:
        """See :meth:`Progress.update`."""
        self.ticker.update(steps, examples, loss, **postfix)

    def validated(self, accuracy: float, iteration: int) -> None:
        """See :meth:`Progress.validated`."""
        self.ticker.validated(accuracy, iteration)

    def close(self) -> None:
        self.ticker.close()
        self.writer.close()
