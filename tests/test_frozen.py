"""Frozen-backbone mode: the chain on cached exit features computes what the full chain does,
trains only heads and routers, caches the features once, and its trained parts load back."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
import torch
import torchvision

from routing_rl.app.cli import main
from routing_rl.app.runs import load_run
from routing_rl.core.execution import dynamic
from routing_rl.envs import register_task
from routing_rl.envs import frozen_task
from routing_rl.envs.frozen_task import FrozenBackboneTask
from routing_rl.nets import frozen, resnet
from routing_rl.nets.multiscale import chain
from routing_rl.nets.routable import routable
from helpers import randomize_routers, varied_images


def nets():
    torch.manual_seed(0)
    yield resnet.build("resnet20-exits", width=0.25, classes=3)
    yield routable(torchvision.models.mobilenet_v3_small(num_classes=3), ["features.3", "features.8"], (3, 32, 32))
    yield resnet.build("resnet20-exits-every3-grid4", width=0.25, classes=3)
    yield routable(torchvision.models.mobilenet_v3_small(num_classes=3), ["features.3", "features.8"], (3, 32, 32), grid=2)


@pytest.mark.parametrize("net", list(nets()), ids=["resnet20", "mobilenet_v3_small", "resnet20-grid4", "mobilenet-grid2"])
def test_the_frozen_chain_on_cached_features_is_the_full_chain(net):
    x = varied_images(16)
    randomize_routers(net, x)
    net.eval()
    cached = frozen.frozen_net(net).eval()
    features = frozen.exit_features(net, x)
    assert features.shape == (16, frozen.feature_width(net)) and cached.input_shape == (features.shape[1],)
    assert cached.leaves == net.leaves and cached.junctions == net.junctions
    assert cached.leaf_path_macs == net.leaf_path_macs, "every path costs the backbone's MACs"
    full, again = net(x), cached(features)
    for leaf in net.leaves:
        torch.testing.assert_close(again.logits[leaf], full.logits[leaf], rtol=1e-4, atol=1e-5)
    routed, routed_cached = dynamic(net, x), dynamic(cached, features)
    assert routed.leaf.tolist() == routed_cached.leaf.tolist() and len(set(routed.leaf.tolist())) > 1
    assert routed.macs.tolist() == routed_cached.macs.tolist()


def test_only_heads_and_routers_learn_and_they_are_the_full_net_s():
    net = resnet.build("resnet20-exits", width=0.25, classes=3)
    cached = frozen.frozen_net(net)
    learned = {id(p) for p in cached.parameters()}
    heads_and_routers = {id(p) for name, p in net.named_parameters() if ".router." in name or name.startswith(("nodes.exit1.", "nodes.exit2."))}
    assert learned == heads_and_routers, "the backbone (segments and the deepest head) has no weights in the frozen net"
    assert set(cached.state_dict()) <= set(net.state_dict())


@pytest.mark.parametrize("make, words", [
    (lambda: chain(), r"is not an exit of pool \+ linear head"),
    (lambda: resnet.build("resnet20-exits", width=0.25, exit_confidence=True), "without --exit-confidence"),
])
def test_nets_frozen_mode_cannot_cache_are_refused(make, words):
    with pytest.raises(ValueError, match=words):
        frozen.frozen_net(make())


def command(env: str, tiny_data, logdir, name: str, *args) -> list[str]:
    return ["--env", env, "--k-cpt", "4e-9", "--preset", "smoke", "--iterations", "3", "--batch-size", "8",
            "--eval-every", "1", "--eval-examples", "10", "--validation-fraction", "0.4", "--data-dir", str(tiny_data),
            "--download", "false", "--device", "cpu", "--logdir", str(logdir), "--run-name", name, "--json", *args]


def test_a_trained_plain_resnet_s_heads_and_routers_train_on_cached_features(tiny_data, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    logdir = tmp_path / "runs"
    assert main(command("routing_rl/CIFAR10Routing-v0", tiny_data, logdir, "plain", "--agent", "static", "--arch", "resnet20")) == 0
    checkpoint = logdir / "plain" / "checkpoint.pt"
    env = "tests/FrozenResNet20-v0"
    if env in gym.registry:
        del gym.registry[env]
    register_task(env, FrozenBackboneTask, chain="resnet20-exits", backbone=str(checkpoint), dataset="cifar10",
                  data_dir=str(tiny_data), download=False, k_cpt=4e-9)
    for agent in ("actor", "threshold"):
        assert main(command(env, tiny_data, logdir, agent, "--agent", agent)) == 0
    capsys.readouterr()
    assert len(list((tmp_path / "cache").glob("frozen-*.pt"))) == 1, "the features are computed once, then read"

    config, task, cached = load_run(logdir / "actor")
    assert config.arch == "resnet20-exits" and cached.input_shape == (16 + 32 + 10,)  # pooled at exit1 and exit2, the logits
    full = task.full_net()
    frozen.attach(full, cached.state_dict()).eval()
    images = task.image_task.dataset().test
    features = task.dataset().test.images
    torch.testing.assert_close(dynamic(full, images.images).logits, dynamic(cached, features).logits, rtol=1e-4, atol=1e-4)
    _, _, static = load_run(logdir / "plain")
    torch.testing.assert_close(full(images.images).logits["exit3"], static(images.images).logits["exit3"], rtol=1e-4, atol=1e-4)
    metrics = json.loads((logdir / "actor" / "metrics.json").read_text())
    assert metrics["dataset"]["frozen_backbone"]["arch"] == "resnet20-exits"
    # the backbone's validation part stays the validation part at any seed: nothing is calibrated on what it trained on
    assert task.dataset().held_out == (0.4, 0, "test") and metrics["dataset"]["frozen_backbone"]["held_out"] == [0.4, 0, "test"]
    trunk_rest, trunk_validation = task.image_task.dataset().validation_indices(0.4, 0, "test")
    for seed in (0, 7):
        rest, validation = task.dataset().validation_indices(0.4, seed, "test")
        assert validation.tolist() == trunk_validation.tolist() and rest.tolist() == trunk_rest.tolist()
    assert main(command(env, tiny_data, logdir, "seed7", "--agent", "threshold", "--seed", "7")) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(command(env, tiny_data, logdir, "other", "--agent", "threshold", "--validation-fraction", "0.2"))
    assert "--validation-fraction 0.4 --validation-mix test" in capsys.readouterr().err
    assert not (logdir / "other").exists(), "refused before the run folder is made"
    with pytest.raises(ValueError, match="trained without a validation part of 0.4 .mix test.; validate on that one: "
                                         "--validation-fraction 0.4 --validation-mix test"):
        task.dataset().validation_indices(0.1, 0, "test")
    # a bare state_dict does not say what it trained on: held_out= says it, and a run's checkpoint must agree
    bare = tmp_path / "plain-state.pt"
    torch.save(static.state_dict(), bare)
    kinds = dict(chain="resnet20-exits", dataset="cifar10", data_dir=str(tiny_data), download=False)
    assert FrozenBackboneTask(backbone=str(bare), **kinds).dataset().held_out is None
    assert FrozenBackboneTask(backbone=str(bare), held_out=(0.4, 5, "test"), **kinds).dataset().held_out == (0.4, 5, "test")
    with pytest.raises(ValueError, match=r"the backbone's run held out \(0.4, 0, 'test'\); drop held_out="):
        FrozenBackboneTask(backbone=str(checkpoint), held_out=(0.4, 1, "test"), **kinds).dataset()
    for bad in ((0.4, 0), (1.5, 0, "test"), (0.1, 0, "val")):
        with pytest.raises(ValueError, match="held_out is"):
            FrozenBackboneTask(backbone=str(bare), held_out=bad, **kinds)

    monkeypatch.setattr(frozen_task, "exit_features", lambda *a, **k: pytest.fail("features computed again"))
    again = FrozenBackboneTask(backbone=str(checkpoint), dataset="cifar10", data_dir=str(tiny_data), download=False)
    torch.testing.assert_close(again.dataset().train.images, task.dataset().train.images)


def test_a_stage_trained_trunk_gets_an_exit_after_every_block(tmp_path):
    torch.manual_seed(0)
    plain = resnet.build("resnet20").eval()
    torch.save(plain.state_dict(), tmp_path / "plain.pt")
    task = FrozenBackboneTask(chain="resnet20-exits-every1", backbone=str(tmp_path / "plain.pt"), dataset="cifar10")
    full = task.full_net().eval()
    assert full.leaves == [f"exit{k}" for k in range(1, 10)]
    x = varied_images(2)
    torch.testing.assert_close(full(x).logits["exit9"], plain(x).logits["exit3"])


def test_a_frozen_task_is_refused_without_weights_or_with_another_width():
    with pytest.raises(ValueError, match="a frozen resnet20-exits needs its trained weights"):
        FrozenBackboneTask()
    with pytest.raises(ValueError, match="unknown chain 'chain-of-fools'"):
        FrozenBackboneTask(chain="chain-of-fools", backbone="x.pt")
    with pytest.raises(ValueError, match="is not a file"):
        FrozenBackboneTask(backbone="missing.pt").full_net()
    with pytest.raises(ValueError, match="--width does not apply"):
        FrozenBackboneTask(backbone="missing.pt").build_net("resnet20-exits", 2, False)
