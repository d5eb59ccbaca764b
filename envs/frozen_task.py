"""Frozen-backbone training: a trained network's exit heads and routers learn, nothing else.

:class:`FrozenBackboneTask` is a routing task on an image dataset whose net is a routed chain
with a trained, frozen backbone. Its examples are not the images but the backbone's cached
outputs at each exit (:func:`~routing_rl.nets.frozen.exit_features`, computed once per example
and kept in the data cache, memory-mapped), and its net is the chain on those
(:func:`~routing_rl.nets.frozen.frozen_net`): every learner trains the heads and routers in
minutes on a CPU, with every path costing the MACs the full backbone spends. Register it
under an id in your own module and train it like any plug-in task (``docs/own-network.md``)::

    register_task("mine/FrozenResNet20-v0", FrozenBackboneTask, chain="resnet20-exits",
                  backbone="runs/plain-resnet20/checkpoint.pt", dataset="cifar10", k_cpt=1e-8)

A frozen run's checkpoint loads into the full net with :func:`~routing_rl.nets.frozen.attach`
(:meth:`FrozenBackboneTask.full_net` builds it with the backbone loaded).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch

from routing_rl.core.graph import RoutedNet
from routing_rl.data import RoutingDataset, Split
from routing_rl.data.containers import VALIDATION_MIXES
from routing_rl.data.cache import cached, check_cache_dir, default_cache_dir
from routing_rl.envs.image_task import ImageTask
from routing_rl.envs.task import RoutingTask, load_factory
from routing_rl.nets import resnet
from routing_rl.nets.frozen import exit_features, frozen_net
from routing_rl.nets.routable import load_backbone
from routing_rl.training.checkpoint import load_checkpoint

FEATURE_BATCH = 500
"""Images per batch while the backbone's exit features are computed."""


def backbone_state(path: str | Path) -> dict[str, torch.Tensor]:
    """A trained net's ``state_dict`` from ``path``: a file saved with ``torch.save(net.state_dict())``
    or a run's ``checkpoint.pt``; loaded with ``weights_only=True``."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"backbone {path} is not a file: give a state_dict saved with torch.save, or a run's checkpoint.pt")
    state = load_checkpoint(path)
    if isinstance(state.get("learner"), dict) and isinstance(state["learner"].get("net"), dict):
        state = state["learner"]["net"]
    if not all(isinstance(value, torch.Tensor) for value in state.values()):
        raise ValueError(f"backbone {path} is not a state_dict of tensors (nor a run's checkpoint)")
    return state


def backbone_held_out(path: str | Path) -> tuple[float, int, str] | None:
    """``(validation fraction, seed, validation mix)`` of the run whose ``checkpoint.pt`` is
    ``path``: the validation part it trained without. None for a bare ``state_dict`` file,
    which does not say what it trained on."""
    identity = load_checkpoint(Path(path)).get("identity")
    if not isinstance(identity, dict) or not {"validation_fraction", "seed", "validation_mix"} <= set(identity):
        return None
    return float(identity["validation_fraction"]), int(identity["seed"]), str(identity["validation_mix"])


def check_held_out(held_out: Sequence) -> tuple[float, int, str]:
    """``held_out=`` as given: ``(validation fraction, seed, validation mix)``."""
    try:
        fraction, seed, mix = held_out
    except (TypeError, ValueError):
        raise ValueError(f"held_out is (validation fraction, seed, validation mix), e.g. (0.1, 0, 'test'), "
                         f"got {held_out!r}") from None
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1 \
            or isinstance(seed, bool) or not isinstance(seed, int) or mix not in VALIDATION_MIXES:
        raise ValueError(f"held_out is (validation fraction in (0, 1), an integer seed, one of "
                         f"{', '.join(VALIDATION_MIXES)}), got {held_out!r}")
    return float(fraction), seed, mix


def weights_digest(net: RoutedNet) -> str:
    """A digest of every tensor of ``net``: the cached features' key, so that other weights
    compute them again."""
    digest = hashlib.sha256()
    for key, tensor in net.state_dict().items():
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:20]


class FrozenBackboneTask(RoutingTask):
    """An image dataset's exit features under a frozen, trained backbone (module docstring).

    Args:
        chain: the routed chain: an image task's arch (``resnetD-exits``), whose backbone
            ``backbone`` fills, or ``"module:function"`` of a function returning a chain with its
            backbone already trained, e.g. a :func:`~routing_rl.nets.routable.routable` of a
            model whose ``state_dict`` it loaded (``backbone`` is then optional).
        backbone: the trained weights: a ``state_dict`` file or a run's ``checkpoint.pt`` whose
            node names the chain shares (a static ``resnetD`` run's for ``resnetD-exits``); for
            a ResNet chain, a trunk of the same depth with any exit spacing (a ``resnet20``
            or ``resnet20-exits`` run's for ``resnet20-exits-every1``: :func:`~routing_rl.nets.resnet.respace`).
            A run's checkpoint also says which validation part the backbone trained without:
            every run on this task validates (and calibrates thresholds) on that part, whatever
            its ``--seed``, and must ask for the same fraction and mix
            (:attr:`~routing_rl.data.RoutingDataset.held_out`). A bare ``state_dict`` does not say:
            give ``held_out``, or the run's own seed draws the part.
        dataset: the image dataset's name, as :class:`~routing_rl.envs.image_task.ImageTask`'s.
        data_dir: where its files are (default ``$ROUTING_RL_DATA_DIR``).
        download: try torchvision's downloaders when the files are not found.
        backbone_width: an image task chain's channel multiplier (the backbone's).
        held_out: ``(validation fraction, seed, validation mix)`` of the validation part a
            backbone that does not say so (a ``state_dict`` file, a ``"module:function"``
            chain) was trained without, as ``--validation-fraction``, ``--seed`` and
            ``--validation-mix`` drew it (:meth:`~routing_rl.data.RoutingDataset.validation_indices`).
            A backbone trained on every training image has no such part: calibrate on it and
            the thresholds are calibrated on images it fitted.

    (``arch``, ``width`` and ``net`` are the environment's own keywords, hence these names.)

    Attributes:
        image_task: the :class:`~routing_rl.envs.image_task.ImageTask` whose images the
            features come from (``image_task.dataset()``: the images, in the same order).
    """

    def __init__(self, chain: str = "resnet20-exits", backbone: str | None = None, dataset: str = "cifar10",
                 backbone_width: int = 1, data_dir: str | Path | None = None, download: bool = True,
                 held_out: Sequence | None = None):
        self.image_task = ImageTask(dataset, data_dir, download)
        self.backbone, self.width = backbone, backbone_width
        self.held_out = None if held_out is None else check_held_out(held_out)
        self.net_factory = chain if ":" in chain else None
        if self.net_factory is None and backbone is None:
            raise ValueError(f"a frozen {chain} needs its trained weights: give backbone= (a state_dict file or a run's "
                             "checkpoint.pt), or chain='module:function' of a function that builds the trained chain")
        if self.net_factory is None and chain not in self.image_task.archs:
            raise ValueError(f"unknown chain {chain!r}; name a chain of exits such as resnet20-exits, or "
                             "'module:function' of a function that builds yours")
        self.arch = chain.rpartition(":")[2]
        self.archs = (self.arch,)

    def full_net(self, k_cpt_input: bool = False) -> RoutedNet:
        """The whole chain (images in, every exit) with the trained backbone loaded, heads and
        routers as initialised by the caller's seed: load a frozen run's state into it with
        :func:`~routing_rl.nets.frozen.attach`."""
        if self.net_factory is not None:
            net = load_factory(self.net_factory)()
            if not isinstance(net, RoutedNet):
                raise TypeError(f"{self.net_factory} returned a {type(net).__name__}, not a RoutedNet chain")
            if k_cpt_input != net.k_cpt_input:
                raise ValueError(f"{self.net_factory} builds routers that {'do not ' if k_cpt_input else ''}read k_cpt; "
                                 "build them with k_cpt_input to match, or use a fixed --k-cpt")
        else:
            net = self.image_task.build_net(self.arch, self.width, k_cpt_input)
        if self.backbone is not None:
            state = backbone_state(self.backbone)
            if self.net_factory is None and resnet.ARCH.fullmatch(self.arch):
                # a trunk of another exit spacing or grid: the same blocks, its heads where they fit
                state = resnet.respace(state, self.arch, like=net.state_dict())
            load_backbone(net, state)
        return net

    def load_dataset(self) -> RoutingDataset:
        images = self.image_task.dataset()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # the heads' and routers' initial weights enter the digest, not the features
            reference = self.full_net()
        cache_dir = default_cache_dir()
        check_cache_dir(cache_dir)
        key = {"dataset": images.description, "arch": self.arch, "weights": weights_digest(reference)}
        entry = cached(cache_dir, "frozen", key, lambda: {
            f"{name}_images": exit_features(reference, getattr(images, name).images, FEATURE_BATCH) for name in ("train", "test")
        }, required=("train_images", "test_images"))
        splits = {name: Split(entry[f"{name}_images"], getattr(images, name).labels, getattr(images, name).source)
                  for name in ("train", "test")}
        held_out = self.held_out
        recorded = None if self.backbone is None else backbone_held_out(self.backbone)
        if recorded is not None and held_out not in (None, recorded):
            raise ValueError(f"held_out={held_out} but the backbone's run held out {recorded}; drop held_out= (the "
                             "checkpoint says it)")
        held_out = held_out or recorded
        description = {**images.description,
                       "frozen_backbone": {"arch": self.arch, "weights": key["weights"], "held_out": held_out}}
        return RoutingDataset(images.name, images.classes, splits["train"], splits["test"], description, images.sources,
                              held_out)

    def build_net(self, arch: str, width: int, k_cpt_input: bool) -> RoutedNet:
        if width != 1:
            raise ValueError("--width does not apply to a frozen backbone; give the task's backbone_width keyword")
        return frozen_net(self.full_net(k_cpt_input))
