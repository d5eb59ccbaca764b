"""The cost model a run charges c_cpt by (``--cost``), measured once and kept with the run.

``macs`` (default): the paper's MACs. ``latency``: every node and router timed, in
MAC-equivalents (:mod:`routing_rl.core.latency`) — read from ``--latency-profile`` (a profile
measured on the device that will run inference, e.g. a CPU, while training runs on a GPU),
or else profiled on the run's device at ``--latency-batch`` examples (default: the training
batch size). The cost model is written to the run folder (``cost.json``) before training; a
resumed run reads it back instead of measuring again, so it keeps charging the same costs.
"""

from __future__ import annotations

import json
from pathlib import Path

from routing_rl.core.graph import RoutedNet
from routing_rl.core.k_cpt import CostModel
from routing_rl.core.latency import check_profile, latency_cost, profile_latency
from routing_rl.core.files import atomic_write_text, read_json
from routing_rl.training.config import TrainConfig

COST_FILE = "cost.json"


def run_cost_model(config: TrainConfig, net: RoutedNet, run_dir: Path | None = None) -> CostModel:
    """The cost model ``config.cost`` asks for, for ``net`` (on the device that will run it).

    With ``run_dir``, a latency profile already there is reused, and a new one is saved there.
    """
    if config.cost == "macs":
        return CostModel.macs(net)
    path = Path(run_dir) / COST_FILE if run_dir is not None else None
    if path is not None and path.is_file():
        profile = read_profile(path)
    elif config.latency_profile is not None:
        profile = read_profile(Path(config.latency_profile))
    else:
        profile = profile_latency(net, config.latency_batch or config.batch_size, seed=config.seed)
    model = latency_cost(net, profile)
    if path is not None and not path.is_file():
        write_cost_model(path, model)
    return model


def read_profile(path: Path) -> dict:
    """The latency profile in ``path``: a ``cost.json`` or a bare :func:`profile_latency` result."""
    try:
        saved = read_json(path)
        profile = saved.get("profile", saved) if isinstance(saved, dict) else saved
        check_profile(profile)
    except (OSError, ValueError) as error:  # ValueError: not JSON, not UTF-8, nested too deeply, or not a profile
        raise ValueError(f"cannot read the latency profile {path}: {error}; write one with experiments/profile_latency.py") from None
    return profile


def write_cost_model(path: Path, model: CostModel) -> None:
    atomic_write_text(Path(path), json.dumps(model.to_json(), indent=2))
