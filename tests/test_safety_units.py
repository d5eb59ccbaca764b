"""Issue 13 below the CLI: atomic files, safe loading, config checks, schedule floors, the
NaN guard, memory estimates and dataset verification (tiny synthetic data only)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import shutil
import signal
import socket
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from synthetic_data import write_image_folder, write_mnist_idx

from routing_rl.core.files import atomic_write, atomic_write_text, remove_stale_temporaries
from routing_rl.core.policies import MAX_HALVINGS, TrainingPolicy, halving
from routing_rl.data import DataNotFoundError, Split, cache, load_dataset
from routing_rl.nets.multiscale import build
from routing_rl.training.checkpoint import CheckpointError, checkpoint_identity, load_checkpoint, save_checkpoint
from routing_rl.training.config import TrainConfig, make_config
from routing_rl.training.guard import NonFiniteLossError
from routing_rl.training.footprint import check_fits, estimate


class Planted:
    """A pickle that, if ever unpickled, leaves a marker file: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


# --- atomic files ------------------------------------------------------------------------


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "checkpoint.pt"
    atomic_write_text(target, "old")

    def fail(stream):
        stream.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, fail)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def killed_write(folder: Path, name: str) -> Path:
    """The temporary file a write of ``folder/name`` killed mid-way leaves (named as
    :func:`atomic_write` names it)."""
    names = []

    def write(stream):
        names.extend(p.name for p in folder.iterdir() if p.name.startswith(f".{name}."))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(folder / name, write)
    (folder / names[0]).write_bytes(b"killed mid-write")
    return folder / names[0]


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path):
    stale = killed_write(tmp_path, "checkpoint.pt")
    kept = [tmp_path / "notes.tmp", tmp_path / ".hidden.tmp", tmp_path / "checkpoint.pt",
            tmp_path / ".notes.abcdefgh.tmp", tmp_path / ".checkpoint.pt.a1b2_c3d.tmp"]  # a user's, named like ours
    for path in kept:
        path.write_text("user's")
    assert remove_stale_temporaries(tmp_path) == [stale]
    assert not stale.exists() and all(p.read_text() == "user's" for p in kept)


def test_the_cache_writes_through_the_one_atomic_writer(tmp_path):
    path = tmp_path / "entry.pt"
    cache.save_entry(path, {"x": torch.arange(3)})
    assert torch.equal(cache.load_entry(path)["x"], torch.arange(3))
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in tmp_path.iterdir()] == ["entry.pt"]


# --- loading never runs code -------------------------------------------------------------


def test_a_planted_pickle_in_a_checkpoint_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "PWNED"
    torch.save({"learner": Planted(marker)}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"refusing to load .*checkpoint\.pt: it holds Python objects"):
        load_checkpoint(tmp_path / "checkpoint.pt")
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_checkpoint_is_named(tmp_path, damage):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"learner": {"w": torch.ones(1000)}, "training_state": {"iteration": 3, "history": []}})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    with pytest.raises(CheckpointError, match=r"cannot read .*checkpoint\.pt: it is empty, truncated"):
        load_checkpoint(path)


def test_a_checkpoint_round_trips_with_weights_only(tmp_path):
    state = {"learner": {"w": torch.randn(4)}, "sampler": {"position": 3},
             "training_state": {"iteration": 7, "history": [{"iteration": 5, "evaluations": [{"accuracy": 0.5}]}],
                                "train_seconds": 1.5}}
    save_checkpoint(tmp_path / "c.pt", state)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert torch.equal(loaded["learner"]["w"], state["learner"]["w"]) and loaded["training_state"] == state["training_state"]


# --- configs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(k_cpt=1e30), "k_cpt must be at most 1 per MAC"),
        (dict(lr=math.inf), "lr must be a finite number > 0, got inf"),
        (dict(k_dec=math.nan), "k_dec must be a finite number >= 0, got nan"),
        (dict(momentum=-1.0), r"momentum must be in \[0, 1\), got -1"),
        (dict(tau=0.0), "tau must be a finite number > 0, got 0"),
        (dict(probability_floor=2.0), r"probability_floor must be in \(0, 1\)"),
        (dict(lr="abc"), "lr must be a number or null, got 'abc'"),
        (dict(iterations=2.5), "iterations must be an integer, got 2.5"),
        (dict(talr="yes"), "talr must be true or false"),
        (dict(run_name="."), "run_name must be one folder name"),
        (dict(run_name=".."), "run_name must be one folder name"),
        (dict(run_name="/tmp/elsewhere"), "run_name must be one folder name"),
        (dict(run_name="a/b"), "run_name must be one folder name"),
        (dict(run_name=""), "run_name must be one folder name"),
    ],
)
def test_bad_settings_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        make_config("smoke", **overrides)


def test_a_hand_edited_config_is_validated_like_a_new_one():
    values = json.loads(make_config("smoke").to_json())
    values["momentum"] = 1.5
    with pytest.raises(ValueError, match="momentum must be in"):
        TrainConfig.from_json(json.dumps(values)).validate()


# --- schedules ---------------------------------------------------------------------------


def test_schedules_stop_halving_at_their_floor():
    assert halving(1.0, 1_240, 10) == 0.5**MAX_HALVINGS > 0
    assert halving(0.1, 10**12, 1) == 0.1 * 0.5**MAX_HALVINGS
    assert halving(1.0, 80_000, 10_000) == pytest.approx(2**-8)  # the paper's schedule is untouched


def test_a_late_softmax_policy_gives_probabilities_not_nan():
    policy = TrainingPolicy("softmax", 1.0, 10)
    scores = torch.tensor([[0.0, 1e-3], [5.0, -5.0], [1e6, -1e6]], requires_grad=True)
    p = policy.probabilities(scores, 1_240)
    assert torch.isfinite(p).all() and torch.allclose(p.sum(1), torch.ones(3))
    p[:, 0].sum().backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("agent, policy", [("actor", None), ("critic", "eps-greedy")])
def test_a_run_resumed_long_after_its_schedules_ran_out_trains_finitely(agent, policy):
    from routing_rl.agents.registry import make_learner

    config = make_config("smoke", agent=agent, policy=policy)  # smoke: lr, τ and ε halve every 10 iterations
    learner = make_learner(config, 3, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    batch = Split(torch.rand(8, 3, 32, 32, generator=generator), torch.arange(8) % 3, torch.zeros(8, dtype=torch.long))
    for iteration in (1_240, 1_241, 10**7):
        stats = learner.train_step(batch, iteration)
        assert math.isfinite(stats["losses/total"]), (iteration, stats)


# --- the NaN guard -----------------------------------------------------------------------


def test_the_trainer_stops_on_a_non_finite_loss_and_keeps_the_last_good_checkpoint():
    from routing_rl.agents.static import StaticLearner
    from routing_rl.app.trainer import fit
    from routing_rl.nets.multiscale import static

    config = make_config("smoke", agent="static", arch="static-1", iterations=8, batch_size=4, eval_every=4,
                         checkpoint_every=2)
    torch.manual_seed(0)
    learner = StaticLearner(static(1, classes=3), config, torch.device("cpu"))
    original = learner.train_step

    def poisoned(batch, iteration):
        stats = original(batch, iteration)
        return {**stats, "losses/total": math.nan} if iteration == 4 else stats

    learner.train_step = poisoned
    saved = []
    split = Split(torch.rand(12, 3, 32, 32), torch.arange(12) % 3, torch.zeros(12, dtype=torch.long))
    with pytest.raises(NonFiniteLossError, match=r"training loss became nan at iteration 5 .*checkpoint of iteration 4 is kept; lower --lr"):
        fit(learner, split, split, config, save=lambda ckpt: saved.append(ckpt["training_state"]["iteration"]))
    assert saved == [2, 4]


def test_joint_training_stops_on_a_non_finite_loss():
    from routing_rl.envs.joint import FeatureTrainer, JointTraining

    net = build("chain", 1, 3)
    trainer = FeatureTrainer(net, JointTraining(batch_size=4, augment=False))
    images = torch.rand(4, 3, 32, 32)
    images[0, 0, 0, 0] = math.nan
    decisions = torch.zeros(4, len(net.junctions), dtype=torch.long).numpy()
    with pytest.raises(NonFiniteLossError, match="feature network's training loss became nan at iteration 1"):
        trainer.record(images, torch.arange(4) % 3, decisions, torch.zeros(4).numpy())
    assert trainer.updates == 0


# --- memory ------------------------------------------------------------------------------


def chain_of(width: int):
    return build("chain", width, 10)


def test_memory_estimate_bounds_wide_nets_without_building_them():
    need = estimate(chain_of)
    assert need.fixed(10_000) == need.fixed(1) * 10_000**2 and need.per_example(10_000) > need.per_example(1) * 9_000
    parameters = sum(p.numel() for p in chain_of(2).parameters())
    assert need.fixed(2) >= 3 * 4 * parameters  # weights, gradients, momentum


@pytest.mark.parametrize("overrides, advice", [(dict(width=10_000), "lower --width to at most"),
                                               (dict(batch_size=100_000_000), "lower --batch-size to at most")])
def test_a_run_that_cannot_fit_is_refused_before_allocating(overrides, advice):
    config = make_config("smoke", agent="actor", **overrides)
    with pytest.raises(MemoryError, match=f"out of memory: .* needs about .* GiB to train, but cpu has .* GiB free; {advice}") as refused:
        check_fits(config, chain_of, torch.device("cpu"))
    suggested = int(str(refused.value).rsplit(" ", 1)[1])
    fitting = dataclasses.replace(config, **{next(iter(overrides)): suggested})
    check_fits(fitting, chain_of, torch.device("cpu"))  # the suggestion fits


# --- datasets ----------------------------------------------------------------------------


def plain_tar(folder: Path, tarball: Path) -> list[int]:
    """An uncompressed tar of ``folder``; returns each member's header offset."""
    with tarfile.open(tarball, "w") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    with tarfile.open(tarball) as tar:
        return [m.offset for m in tar.getmembers()]


def test_a_cifar_tar_cut_between_two_files_is_refused(data_env):
    write_image_folder(data_env / "folder", "cifar")
    tarball = data_env / "data" / "cifar.tar"
    tarball.parent.mkdir()
    offsets = plain_tar(data_env / "folder", tarball)
    tarball.write_bytes(tarball.read_bytes()[: offsets[-1]])  # cleanly before the last member
    with pytest.raises(DataNotFoundError, match=r"cifar\.tar is cut short: the archive stops after .* bytes without its end-of-archive marker"):
        load_dataset("cifar10", data_dir=data_env / "data", download=False)


def test_a_split_missing_a_class_is_refused(data_env):
    write_image_folder(data_env / "data", "cifar")
    shutil.rmtree(data_env / "data" / "test" / "deer")
    with pytest.raises(ValueError, match="dataset 'cifar10' is incomplete: its test split has no deer"):
        load_dataset("cifar10", data_dir=data_env / "data", download=False)


def test_a_hybrid_without_cifar_images_is_refused(data_env):
    write_mnist_idx(data_env / "data" / "MNIST" / "raw")
    write_image_folder(data_env / "data" / "cifar", "cifar")
    for name in ("airplane", "automobile", "deer", "frog", "horse"):
        shutil.rmtree(data_env / "data" / "cifar" / "test" / name)
    with pytest.raises(ValueError, match="dataset 'hybrid' is incomplete: its test split has no airplane, .*cifar images"):
        load_dataset("hybrid", data_dir=data_env / "data", download=False)


def test_a_cache_file_with_the_wrong_contents_is_named_and_rebuilt(data_env):
    write_mnist_idx(data_env / "data")
    first = load_dataset("mnist", data_dir=data_env / "data", download=False)
    entries = sorted((data_env / "cache").glob("*.pt"))
    assert entries
    for path in entries:
        torch.save({"train_images": torch.zeros(2, 3, 32, 32)}, path)
    with pytest.warns(UserWarning, match=r"cache file .*\.pt lacks .*; rebuilding it"):
        again = load_dataset("mnist", data_dir=data_env / "data", download=False)
    assert torch.equal(again.train.images, first.train.images) and torch.equal(again.test.labels, first.test.labels)
    assert all(cache.entry_problem(torch.load(p, weights_only=True), cache.SPLIT_KEYS[2:]) is None for p in entries)


def test_a_cache_file_holding_a_pickle_is_rebuilt_without_running_it(data_env):
    write_mnist_idx(data_env / "data")
    load_dataset("mnist", data_dir=data_env / "data", download=False)
    marker = data_env / "PWNED"
    for path in (data_env / "cache").glob("*.pt"):
        torch.save({"train_images": Planted(marker)}, path)
    with pytest.warns(UserWarning, match="cannot be read"):
        load_dataset("mnist", data_dir=data_env / "data", download=False)
    assert not marker.exists()


# --- SB3 zips ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def a2c_run(tmp_path_factory):
    from test_sb3 import short_config, tiny_dataset

    from routing_rl.agents.sb3 import train_sb3

    run_dir = tmp_path_factory.mktemp("a2c")
    train_sb3(short_config("a2c", iterations=16, checkpoint_every=8), tiny_dataset(), run_dir, torch.device("cpu"))
    return run_dir


def rewrite_zip(source: Path, target: Path, replace: dict[str, bytes]) -> None:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for name in old.namelist():
            new.writestr(name, replace.get(name, old.read(name)))


def test_sb3_loading_never_unpickles_the_zip_data(a2c_run, tmp_path):
    import base64

    import cloudpickle

    from routing_rl.agents.sb3 import RoutingA2C, load_sb3

    marker = tmp_path / "PWNED"
    payload = base64.b64encode(cloudpickle.dumps(Planted(marker))).decode()
    with zipfile.ZipFile(a2c_run / "model.zip") as archive:
        data = json.loads(archive.read("data"))
    for key, value in data.items():
        if isinstance(value, dict) and ":serialized:" in value:
            value[":serialized:"] = payload
    rewrite_zip(a2c_run / "model.zip", tmp_path / "planted.zip", {"data": json.dumps(data).encode()})
    model, net = load_sb3(tmp_path / "planted.zip")
    assert model.num_timesteps == data["num_timesteps"] and net is model.routed_net
    assert isinstance(RoutingA2C.load(tmp_path / "planted.zip"), RoutingA2C)  # SB3's classmethod is safe too
    assert not marker.exists()


def test_a_planted_pickle_among_sb3_weights_is_refused(a2c_run, tmp_path):
    import io

    from routing_rl.agents.sb3 import SB3LoadError, load_sb3

    marker = tmp_path / "PWNED"
    buffer = io.BytesIO()
    torch.save({"weight": Planted(marker)}, buffer)
    rewrite_zip(a2c_run / "model.zip", tmp_path / "planted.zip", {"policy.pth": buffer.getvalue()})
    with pytest.raises(SB3LoadError, match=r"cannot load the weights in .*planted\.zip"):
        load_sb3(tmp_path / "planted.zip")
    assert not marker.exists()


def test_a_truncated_sb3_checkpoint_falls_back_to_the_newest_good_one(a2c_run, tmp_path, capsys):
    from test_sb3 import short_config, tiny_dataset

    from routing_rl.agents.sb3 import checkpoints, train_sb3

    run_dir = tmp_path / "run"
    shutil.copytree(a2c_run, run_dir)
    newest, older = checkpoints(run_dir)[:2]
    newest.write_bytes(newest.read_bytes()[:1000])
    result = train_sb3(short_config("a2c", iterations=24, checkpoint_every=8), tiny_dataset(), run_dir,
                       torch.device("cpu"), resume=True)
    assert f"skipping checkpoint {newest}: cannot read" in capsys.readouterr().err
    iterations = [entry["iteration"] for entry in result.history]
    assert iterations == sorted(set(iterations)), "validations after the older checkpoint are not kept twice"
    assert result.model.feature_trainer.updates >= 24 and older.is_file()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir))
    events.Reload()
    steps = [event.step for event in events.Scalars("charts/val_accuracy")]
    assert steps == iterations, "TensorBoard shows the validations of the resumed history, each once"


def test_sb3_zips_are_written_atomically(a2c_run, tmp_path):
    from routing_rl.agents.sb3 import load_sb3

    model, _ = load_sb3(a2c_run / "model.zip")
    model.save(tmp_path / "best_model")  # SB3's EvalCallback passes names without .zip
    assert [p.name for p in tmp_path.iterdir()] == ["best_model.zip"]
    assert load_sb3(tmp_path / "best_model.zip")[0].num_timesteps == model.num_timesteps
    assert os.stat(tmp_path / "best_model.zip").st_size > 0


def test_a_planted_pickle_among_cifar_batches_is_refused_and_never_runs(data_env):
    import pickle

    from synthetic_data import write_cifar_pickles

    folder = data_env / "data" / "cifar-10-batches-py"
    write_cifar_pickles(folder)
    marker = data_env / "PWNED"
    (folder / "data_batch_1").write_bytes(pickle.dumps({"data": Planted(marker), "labels": [0]}))
    with pytest.raises(DataNotFoundError, match=r"data_batch_1: not a CIFAR-10 python batch \(refusing to unpickle pathlib"):
        load_dataset("cifar10", data_dir=data_env / "data", download=False)
    assert not marker.exists()


# --- issue 48: locks that are not what the lock writes, checkpoints that disagree with their run


@contextlib.contextmanager
def deadline(seconds: int):
    """Fail with TimeoutError, instead of hanging, when the block (a read of a FIFO, say)
    takes longer than ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


LIVE = os.getppid()  # a live process of this host that is not this one
HOST = socket.gethostname()


@pytest.mark.parametrize("text, reason", [
    (f'{{"pid": {2**70}, "host": "{HOST}", "started": 0}}', "its pid 1180591620717411303424 is not a process id"),
    (f'{{"pid": 0, "host": "{HOST}", "started": 0}}', "its pid 0 is not a process id"),
    (f'{{"pid": -1, "host": "{HOST}", "started": 0}}', "its pid -1 is not a process id"),
    (f'{{"pid": {LIVE}, "host": "{HOST}", "started": 1e400}}', "its start time inf is not a time"),
    (f'{{"pid": {LIVE}, "host": "{HOST}", "started": NaN}}', "its start time nan is not a time"),
    (f'{{"pid": {LIVE}, "host": "{HOST}", "started": 1e17}}', "its start time 1e+17 lies in the future"),
    (f'{{"pid": {LIVE}, "host": "{HOST}", "started": {10**400}}}', "lies in the future"),
    (f'{{"pid": {LIVE}, "host": "{HOST}", "started": "yesterday"}}', "its start time 'yesterday' is not a time"),
])
def test_a_lock_with_impossible_fields_is_refused_and_kept(text, reason, tmp_path):
    from routing_rl.core.lock import FolderLock, LockedError, live_owner

    lock = tmp_path / "run.lock"
    lock.write_text(text)
    warnings = []
    assert live_owner(lock) is None  # nobody's: the start refuses it (below), never takes it over
    with pytest.raises(LockedError, match="is not a lock file written by routing-rl") as refusal:
        FolderLock(lock).acquire(warn=warnings.append)
    assert reason in str(refusal.value) and "delete it and start again" in str(refusal.value)
    assert lock.read_text() == text and warnings == [], "the lock is kept until a person decides"


@pytest.mark.parametrize("kind", ["a FIFO", "a folder", "a symbolic link"])
def test_a_lock_that_is_not_a_file_is_refused_without_waiting(kind, tmp_path):
    from routing_rl.core.lock import FolderLock, LockedError, live_owner

    lock = tmp_path / "run.lock"
    if kind == "a FIFO":
        os.mkfifo(lock)
    elif kind == "a folder":
        lock.mkdir()
    else:
        os.mkfifo(tmp_path / "elsewhere")
        lock.symlink_to(tmp_path / "elsewhere")
    for attempt in (lambda: live_owner(lock), lambda: FolderLock(lock).acquire()):
        with deadline(10), pytest.raises(LockedError, match=f"run.lock is {kind}, not a lock file written by routing-rl"):
            attempt()
    assert lock.is_symlink() or lock.exists()


def training_checkpoint(config: TrainConfig, iteration: int = 4, **changes) -> dict:
    """A checkpoint as the trainer writes it for ``config`` at ``iteration`` (validated at 2, 4)."""
    state = {
        "learner": {"net": {"weight": torch.ones(2, 2)}},
        "sampler": {"generator": torch.Generator().get_state(), "order": torch.arange(4), "position": 0},
        "augment_generator": torch.Generator().get_state(),
        "random_states": {"cpu": torch.get_rng_state(), "cuda": []},
        "training_state": {"iteration": iteration, "history": [{"iteration": i} for i in range(2, iteration + 1, 2)],
                           "train_seconds": 1.5},
        "identity": checkpoint_identity(config),
    }
    for path, value in changes.items():  # "training_state.iteration" -> state["training_state"]["iteration"]
        *parents, name = path.split(".")
        place = functools.reduce(dict.__getitem__, parents, state)
        if value is DELETE:
            del place[name]
        else:
            place[name] = value
    return state


DELETE = object()
RUN = TrainConfig(agent="static", arch="static-1", iterations=4, k_cpt=4e-9, seed=0)


@pytest.mark.parametrize("changes, message", [
    ({"training_state.iteration": -5}, "its iteration -5 is not a whole number in 0 ... 4"),
    ({"training_state.iteration": "ten"}, "its iteration 'ten' is not a whole number in 0 ... 4"),
    ({"training_state.iteration": 5}, "its iteration 5 is not a whole number in 0 ... 4"),
    ({"training_state.iteration": True}, "its iteration True is not a whole number"),
    ({"training_state.history": [{"iteration": 10}, {"iteration": 20}]}, "its history of validations does not end by"),
    ({"training_state.history": [{"iteration": 4}, {"iteration": 2}]}, "its history of validations does not end by"),
    ({"training_state.train_seconds": math.nan}, "its train_seconds nan is not a duration"),
    ({"training_state.epoch": 3}, "its training_state is not {iteration, history, train_seconds}"),
    ({"sampler": DELETE}, "it holds no sampler"),
    ({"augment_generator": DELETE, "learner": DELETE}, "it holds no learner and no augment_generator"),
    ({"sampler": {"generator": "seed 0"}}, "its random generators' states are not tensors"),
    ({"identity.k_cpt": 1e-3}, "k_cpt 0.001 (the config: 4e-09)"),
    ({"identity.seed": 5}, "seed 5 (the config: 0)"),
    ({"identity.iterations": 40}, "iterations 40 (the config: 4)"),
])
def test_a_checkpoint_that_disagrees_with_its_run_is_refused(changes, message, tmp_path):
    save_checkpoint(tmp_path / "checkpoint.pt", training_checkpoint(RUN, **changes))
    with pytest.raises(CheckpointError) as refusal:
        load_checkpoint(tmp_path / "checkpoint.pt", config=RUN)
    assert message in str(refusal.value) and "\n" not in str(refusal.value)
    assert "--overwrite" in str(refusal.value) or "restore those values in config.json" in str(refusal.value)


@pytest.mark.parametrize("identity", [None, {name: getattr(RUN, name) for name in ("agent", "arch", "width", "env", "dataset")}],
                         ids=["no identity", "identity of five fields"])
def test_a_checkpoint_written_before_it_recorded_its_settings_still_loads(identity, tmp_path):
    state = training_checkpoint(RUN)
    state.pop("identity")
    if identity is not None:
        state["identity"] = identity
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    assert load_checkpoint(tmp_path / "checkpoint.pt", config=RUN)["training_state"]["iteration"] == 4


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_checkpoint_with_non_finite_weights_is_refused(value, tmp_path):
    state = training_checkpoint(RUN)
    state["learner"]["net"]["weight"][1, 0] = value
    save_checkpoint(tmp_path / "checkpoint.pt", state)
    for config in (None, RUN):
        with pytest.raises(CheckpointError, match=r"its weights are not finite \(tensor weight holds NaN or infinity\)"):
            load_checkpoint(tmp_path / "checkpoint.pt", config=config)


def test_json_too_deep_to_parse_is_a_value_error(tmp_path):
    from routing_rl.core.files import read_json

    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="it nests too deeply to be read"):
        read_json(tmp_path / "deep.json")
