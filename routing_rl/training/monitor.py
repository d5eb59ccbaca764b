"""TensorBoard logging and progress bars, with one naming scheme for every learner.

Tags are namespaced and stepped by training iteration (environment step for SB3):
``losses/`` (c_err, c_cpt, c_mod, c_dec, c_ure, total), ``charts/`` (accuracies, mean MACs,
examples/s, lr, tau or epsilon), ``routing/`` (fraction of examples at each leaf, router
score histograms) and ``figures/`` (node-link diagrams).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

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


class Monitor:
    """A TensorBoard writer into ``run_dir`` and a tqdm bar over the training iterations.

    The bar is silent when stderr is not a terminal (CI, redirected logs). A run resumed from
    its checkpoint at iteration ``initial`` asks TensorBoard to drop the events after
    ``initial`` that the interrupted process wrote past that checkpoint (``purge_step``), so
    no step is shown twice.
    """

    def __init__(self, run_dir: Path, total: int, initial: int = 0, description: str = "train"):
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=initial + 1 if initial else None)
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=description,
            unit="it",
            dynamic_ncols=True,
            disable=not sys.stderr.isatty(),
        )

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
        clean = {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in hparams.items()}
        self.writer.add_hparams(clean, {f"hparams/{k}": float(v) for k, v in metrics.items()}, run_name=".")

    def progress(self, steps: int, **postfix: float) -> None:
        self.bar.update(steps)
        if postfix:
            self.bar.set_postfix({k: f"{v:.4g}" for k, v in postfix.items()}, refresh=False)

    def close(self) -> None:
        self.bar.close()
        self.writer.close()
