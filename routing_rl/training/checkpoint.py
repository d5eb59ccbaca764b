"""Checkpoints: written atomically (:mod:`routing_rl.core.files`), loaded without running code.

``torch.load(..., weights_only=True)`` unpickles only tensors and plain containers, so a
planted pickle in a run folder cannot execute anything; a file that fails that load, or is
truncated, is refused with :class:`CheckpointError` naming it.

A checkpoint names the run it belongs to and the settings it was trained with
(:func:`checkpoint_identity`: every field of the config but the machine's settings and where
the run lies); :func:`load_checkpoint` given the run's config refuses one of another run (agent,
arch, width, env id or dataset differ), one whose settings disagree with the config (a
hand-edited ``k_cpt``, ``seed`` or ``iterations``), and one whose training state is not what
the trainer writes (no sampler, an iteration outside ``0 ... iterations``); given its net, one
whose tensors have other names or shapes than the net's, and a dynamic-k_cpt net's whose routers
read k_cpt on the paper's linear scale (before :func:`~routing_rl.core.k_cpt.router_input` was
logarithmic: they would misread it). Checkpoints written before they
carried their identity, or only its first five fields, are checked on what they carry (another
arch or task is refused by the tensors; another agent of the same arch cannot be told).
A checkpoint whose net holds NaN or infinite weights is refused: nothing trained or evaluated
from it would mean anything.

:func:`random_states` / :func:`restore_random_states`: torch's global generators (CPU and
every CUDA device), saved beside the loop's own so that nothing a step draws differs after a
resume.
"""

from __future__ import annotations

import json
import math
import pickle
import zipfile
from pathlib import Path

import torch

from routing_rl.core.files import atomic_write
from routing_rl.nets.router import K_CPT_UNIT_BUFFER
from routing_rl.training.config import BEFORE_NESTING, RESUME_OVERRIDES, TrainConfig

IDENTITY = ("agent", "arch", "width", "env", "dataset")
"""The config fields that name the run a checkpoint belongs to."""
PLACE = ("logdir", "run_name")
"""Where the run lies: a run folder may be moved or renamed and resumed there."""
TRAINING_STATE = ("iteration", "history", "train_seconds")
"""The fields of the trainer's ``training_state``."""


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded safely; the message names the file and why."""


def save_checkpoint(path: Path, state: dict) -> None:
    """``torch.save(state)`` to ``path``, atomically. A failed write (a full disk) raises its
    own OSError: torch's zip writer would report it as ``RuntimeError: unexpected pos``."""

    def write(stream) -> None:
        failed: list[OSError] = []

        class Recording:  # the file as torch's writer sees it, remembering why a write failed
            def write(self, data) -> int:
                try:
                    return stream.write(data)
                except OSError as error:
                    failed.append(error)
                    raise

            def flush(self) -> None:
                stream.flush()

        try:
            torch.save(state, Recording())
        except RuntimeError:
            if failed:
                raise failed[0] from None
            raise

    atomic_write(path, write)


def checkpoint_identity(config: TrainConfig) -> dict:
    """What run a checkpoint of ``config`` belongs to and the settings it trains with: every
    field but the machine's (:data:`~routing_rl.training.config.RESUME_OVERRIDES`) and the
    run's place (:data:`PLACE`), as plain JSON values."""
    values = json.loads(config.to_json())
    return {name: value for name, value in values.items() if name not in (*RESUME_OVERRIDES, *PLACE)}


def random_states() -> dict:
    """torch's global random generators: CPU, and each CUDA device's once CUDA is in use."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


def restore_random_states(states: dict | None) -> None:
    """Set the generators :func:`random_states` saved (None: a checkpoint from before they were
    saved; CUDA states only onto as many CUDA devices, as when resuming on the same machine)."""
    if states is None:
        return
    torch.set_rng_state(states["cpu"].cpu())
    if states["cuda"] and torch.cuda.is_available() and torch.cuda.device_count() == len(states["cuda"]):
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])


def load_checkpoint(path: Path, map_location="cpu", config: TrainConfig | None = None,
                    net: torch.nn.Module | None = None) -> dict:
    """The state saved by :func:`save_checkpoint`; :class:`CheckpointError` for anything else,
    or (given the resuming run's ``config`` and ``net``) for a checkpoint of another run."""
    path = Path(path)
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(
            f"refusing to load {path}: it holds Python objects, not only tensors and plain data ({_reason(error)}); "
            "it was not written by routing-rl: delete it, or start the run again with --overwrite"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as error:
        raise CheckpointError(
            f"cannot read {path}: it is empty, truncated or not a checkpoint ({_reason(error)}); "
            "start the run again with --overwrite, or restore the file"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"cannot read {path}: it holds a {type(state).__name__}, not a checkpoint")
    if config is not None:
        _check_identity(path, state, config)
        _check_training_state(path, state, config)
    if net is not None:
        _check_tensors(path, state, net)
    _check_finite(path, state)
    return state


def _describe(identity: dict) -> str:
    return ", ".join(f"{name} {identity.get(name)}" for name in IDENTITY if identity.get(name) is not None)


def _check_identity(path: Path, state: dict, config: TrainConfig) -> None:
    saved, expected = state.get("identity"), checkpoint_identity(config)
    if saved is None:  # written before checkpoints named their run: the tensors' check decides
        return
    if not isinstance(saved, dict) or any(saved.get(name) != expected[name] for name in IDENTITY):
        theirs = _describe(saved) if isinstance(saved, dict) else "unnamed"
        raise CheckpointError(f"{path} was written by another run ({theirs}), not by this one ({_describe(expected)}); "
                              "resume the run it came from, or start this one again with --overwrite")
    edited = settings_disagreement(saved, config)
    if edited:
        raise CheckpointError(f"{path} was trained with other settings than the run's config.json says: {edited}; "
                              "restore those values in config.json to resume, or start a new run with the new ones")


def settings_disagreement(saved: dict, config: TrainConfig) -> str | None:
    """The settings recorded with a checkpoint (:func:`checkpoint_identity`) that ``config``
    (the run's config.json) gives other values, as ``"k_cpt 4e-09 (the config: 0.001), ..."``,
    each as the run trains with it (the learner's defaults filled in); None when they agree. A
    field the checkpoint does not carry (written before it recorded its settings) cannot be
    compared; one written before the learners' options nested names every option it had."""
    ours = json.loads(config.to_json())
    if "learner_options" not in saved:
        ours["learner_options"] = {}
    known = {name: value for name, value in saved.items() if name in ours or name in BEFORE_NESTING}
    theirs = TrainConfig.from_values({**ours, **known}).resolved_values()
    expected = config.resolved_values()
    edited = [name for name in sorted(expected) if name not in (*RESUME_OVERRIDES, *PLACE) and theirs.get(name) != expected[name]]
    return ", ".join(f"{name} {theirs.get(name)!r} (the config: {expected[name]!r})" for name in edited) or None


def _check_training_state(path: Path, state: dict, config: TrainConfig) -> None:
    """The parts of a checkpoint the trainer resumes from are there, with values it can have written."""
    missing = [name for name in ("learner", "sampler", "augment_generator", "training_state") if name not in state]
    if missing:
        raise CheckpointError(f"cannot resume from {path}: it holds no {' and no '.join(missing)}; it was not written "
                              "by routing-rl's trainer: restore the file, or start the run again with --overwrite")
    training = state["training_state"]
    problem = _training_state_problem(training, config.iterations)
    if problem is None and not (isinstance(state["sampler"], dict) and torch.is_tensor(state["sampler"].get("generator"))
                                and torch.is_tensor(state["augment_generator"])):
        problem = "its random generators' states are not tensors"
    if problem is not None:
        raise CheckpointError(f"cannot resume from {path}: {problem}; restore the file, or start the run again "
                              "with --overwrite")


def _training_state_problem(training, iterations: int) -> str | None:
    """Why ``training`` is not a training state of a run of ``iterations`` iterations (None: it is)."""
    if not isinstance(training, dict) or sorted(training) != sorted(TRAINING_STATE):
        return f"its training_state is not {{{', '.join(TRAINING_STATE)}}}"
    iteration, history, seconds = (training[name] for name in TRAINING_STATE)
    if isinstance(iteration, bool) or not isinstance(iteration, int) or not 0 <= iteration <= iterations:
        return f"its iteration {iteration!r} is not a whole number in 0 ... {iterations} (the run's iterations)"
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        return f"its train_seconds {seconds!r} is not a duration"
    validated = [entry.get("iteration") if isinstance(entry, dict) else None for entry in history] \
        if isinstance(history, list) else None
    if validated is None or any(isinstance(i, bool) or not isinstance(i, int) for i in validated) or \
            validated != sorted(set(validated)) or (validated and not 1 <= validated[0] <= validated[-1] <= iteration):
        return f"its history of validations does not end by iteration {iteration}, one entry per iteration validated"
    return None


def _check_finite(path: Path, state: dict) -> None:
    """Refuse a checkpoint whose net holds a NaN or infinite weight."""
    learner = state.get("learner")
    saved = learner.get("net") if isinstance(learner, dict) else None
    if not isinstance(saved, dict):
        return
    for name, tensor in saved.items():
        if torch.is_tensor(tensor) and tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            raise CheckpointError(f"refusing to load {path}: its weights are not finite (tensor {name} holds NaN or "
                                  "infinity), so nothing trained or evaluated from it would mean anything; start the "
                                  "run again with --overwrite (with a lower --lr if it diverged)")


def _check_tensors(path: Path, state: dict, net: torch.nn.Module) -> None:
    learner = state.get("learner")
    saved = learner.get("net") if isinstance(learner, dict) else None
    if not isinstance(saved, dict):
        raise CheckpointError(f"cannot read {path}: it holds no learner's net; start the run again with --overwrite, "
                              "or restore the file")
    shapes = {name: tuple(getattr(tensor, "shape", ("not a tensor",))) for name, tensor in saved.items()}
    expected = {name: tuple(tensor.shape) for name, tensor in net.state_dict().items()}
    for name in sorted(set(shapes) | set(expected)):
        if name.endswith("." + K_CPT_UNIT_BUFFER) and name not in shapes:
            raise CheckpointError(f"{path} was trained when routers read a dynamic k_cpt as k_cpt × 1e7, not on "
                                  "today's log scale, so they would misread every k_cpt; train it again (start the "
                                  "run again with --overwrite)")
        if shapes.get(name) != expected.get(name):
            there, here = shapes.get(name, "missing"), expected.get(name, "missing")
            raise CheckpointError(f"{path} holds another net than this run's (tensor {name}: {there} there, {here} "
                                  "here); resume the run it came from, or start this one again with --overwrite")


def _reason(error: BaseException) -> str:
    """The informative line of a torch.load error, short."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "GLOBAL" in line or "Unsupported" in line:
            return line
    return lines[0].split(". ")[0] if lines else type(error).__name__
