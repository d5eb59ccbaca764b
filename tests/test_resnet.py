"""CIFAR ResNets with early exits: their shape, MACs, static paths, and every learner through the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from routing_rl.app.cli import main
from routing_rl.app.runs import load_run
from routing_rl.core.execution import dynamic
from routing_rl.envs.image_task import ImageTask
from routing_rl.nets import resnet
from routing_rl.nets.routable import load_backbone
from routing_rl.training.config import TrainConfig
from routing_rl.training.evaluate import evaluate
from helpers import randomize_routers, varied_images


def test_resnet20_macs_are_the_hand_count():
    net = resnet.build("resnet20-exits")
    conv = 32 * 32 * 9 * 16 * 16  # a 3×3 convolution of stage 1
    assert net.macs["seg1"] == 32 * 32 * 9 * 3 * 16 + 6 * conv
    # stage 2: its first convolution reads 16 channels at stride 2, the five others 32 channels on 16×16
    assert net.macs["seg2"] == 16 * 16 * 9 * 16 * 32 + 5 * 16 * 16 * 9 * 32 * 32
    assert net.macs["seg3"] == 8 * 8 * 9 * 32 * 64 + 5 * 8 * 8 * 9 * 64 * 64
    assert [net.macs[f"exit{k}"] for k in (1, 2, 3)] == [16 * 10, 32 * 10, 64 * 10]
    assert net.router_macs["seg1"] == 16 * 16 + 16 * 16 + 16 * 2 and net.router_macs["seg3"] == 0
    plain = resnet.build("resnet20")
    assert plain.leaf_path_macs == [net.macs["seg1"] + net.macs["seg2"] + net.macs["seg3"] + 640] == [40_551_040]
    assert sum(p.numel() for p in plain.parameters()) == 269_722  # ResNet-20's 0.27M


@pytest.mark.parametrize("depth, blocks", [(20, 3), (32, 5), (56, 9)])
def test_depths_have_three_stages_of_n_blocks_and_the_plain_net_is_the_deepest_path(depth, blocks):
    net = resnet.build(f"resnet{depth}-exits", width=0.25)
    assert net.leaves == ["exit1", "exit2", "exit3"] and net.junctions == ["seg1", "seg2"]
    assert [len(net.nodes[f"seg{k}"].transform) for k in (1, 2, 3)] == [blocks + 1, blocks, blocks]
    plain = resnet.build(f"resnet{depth}", width=0.25)
    assert plain.leaves == ["exit3"] and not plain.junctions
    assert set(plain.state_dict()) <= set(net.state_dict()), "a plain checkpoint's names are the routed net's"


def test_static_paths_compute_what_the_routed_net_computes_at_that_exit():
    routed = resnet.build("resnet20-exits", width=0.25).eval()
    prefix = resnet.build("resnet20-exit2", width=0.25).eval()
    prefix.load_state_dict({k: v for k, v in routed.state_dict().items() if k in prefix.state_dict()})
    x = varied_images(3)
    torch.testing.assert_close(prefix(x).logits["exit2"], routed(x).logits["exit2"])
    assert prefix.leaf_path_macs[0] == routed.path_macs("exit2") - routed.router_macs["seg1"] - routed.router_macs["seg2"]


def test_exit_every_k_blocks_puts_an_exit_after_every_k_and_the_rest_in_the_last_segment():
    net = resnet.resnet(20, width=0.25, exit_every=2)  # 9 blocks: 2, 2, 2, 2, 1
    assert net.leaves == [f"exit{k}" for k in range(1, 6)]
    assert [len(net.nodes[f"seg{k}"].transform) for k in range(1, 6)] == [3, 2, 2, 2, 1]
    assert net.leaf_path_macs[-1] == pytest.approx(resnet.resnet(20, width=0.25).leaf_path_macs[-1], rel=0.01)


def test_resnet56_with_an_exit_every_3_blocks_costs_the_plain_net_plus_its_heads_and_routers():
    net = resnet.build("resnet56-exits-every3")
    plain = resnet.build("resnet56")
    segments = [f"seg{k}" for k in range(1, 10)]
    assert net.leaves == [f"exit{k}" for k in range(1, 10)] and net.junctions == segments[:-1]
    # seg4 is stage 2's first three blocks: one convolution reads 16 channels at stride 2, five 32 channels on 16×16
    assert net.macs["seg4"] == 16 * 16 * 9 * 16 * 32 + 5 * 16 * 16 * 9 * 32 * 32
    heads = [net.macs[f"exit{k}"] for k in range(1, 10)]
    assert heads == [16 * 10] * 3 + [32 * 10] * 3 + [64 * 10] * 3
    # stage 3 (8×8, twice the channels) costs what stage 2 does
    stages = 18 * 32 * 32 * 9 * 16 * 16 + 2 * (16 * 16 * 9 * 16 * 32 + 17 * 16 * 16 * 9 * 32 * 32)
    assert plain.leaf_path_macs == [32 * 32 * 9 * 3 * 16 + stages + 640] == [125_485_696]
    assert sum(net.macs[name] for name in segments) + heads[-1] == plain.leaf_path_macs[0]
    routers = [net.router_macs[name] for name in segments]
    assert all(routers[:-1]) and routers[-1] == 0
    assert net.leaf_path_macs[-1] == plain.leaf_path_macs[0] + sum(routers)
    assert net.full_macs == plain.leaf_path_macs[0] + sum(heads[:-1]) + sum(routers)


def test_every_b_static_paths_compute_the_routed_net_s_exits_and_a_plain_one_loads_into_it():
    routed = resnet.build("resnet56-exits-every3", width=0.25).eval()
    prefix = resnet.build("resnet56-exit4-every3", width=0.25).eval()
    assert prefix.leaves == ["exit4"] and not prefix.junctions
    prefix.load_state_dict({k: v for k, v in routed.state_dict().items() if k in prefix.state_dict()})
    x = varied_images(3)
    torch.testing.assert_close(prefix(x).logits["exit4"], routed(x).logits["exit4"])
    assert prefix.leaf_path_macs[0] == routed.path_macs("exit4") - sum(routed.router_macs[f"seg{k}"] for k in range(1, 5))
    plain = resnet.build("resnet56-every3", width=0.25).eval()
    assert plain.leaves == ["exit9"] and plain.leaf_path_macs == resnet.build("resnet56", width=0.25).leaf_path_macs
    new = load_backbone(routed, plain.state_dict())
    assert new and all(".router." in key or key.split(".")[1] in {f"exit{k}" for k in range(1, 9)} for key in new)
    torch.testing.assert_close(routed(x).logits["exit9"], plain(x).logits["exit9"])
    with pytest.raises(ValueError, match="tensors this net has not"):  # a plain resnet56 is cut at other places
        load_backbone(routed, resnet.build("resnet56", width=0.25).state_dict())


def test_a_trunk_respaced_computes_the_same_blocks_and_keeps_the_heads_where_exits_coincide():
    torch.manual_seed(0)
    stages = resnet.build("resnet56-exits", width=0.25).eval()  # exits after blocks 9, 18, 27
    every3 = resnet.build("resnet56-exits-every3", width=0.25).eval()  # after 3, 6, ..., 27
    new = load_backbone(every3, resnet.respace(stages.state_dict(), "resnet56-exits-every3"))
    assert {key.split(".")[1] for key in new} == {f"exit{k}" for k in (1, 2, 4, 5, 7, 8)} | \
        {f"seg{k}" for k in (1, 2, 4, 5, 7, 8)}, "only the heads and routers at the new exits are new"
    x = varied_images(3)
    theirs, ours = stages(x), every3(x)
    for stage_exit, block_exit in (("exit1", "exit3"), ("exit2", "exit6"), ("exit3", "exit9")):
        torch.testing.assert_close(ours.logits[block_exit], theirs.logits[stage_exit])
    torch.testing.assert_close(ours.scores["seg6"], theirs.scores["seg2"])
    back = resnet.build("resnet56-exits", width=0.25).eval()
    assert not load_backbone(back, resnet.respace(every3.state_dict(), "resnet56-exits")), "and back, nothing new"
    torch.testing.assert_close(back(x).logits["exit3"], theirs.logits["exit3"])
    plain = resnet.build("resnet56", width=0.25).eval()  # a static run's trunk: exits after every block
    every1 = resnet.build("resnet56-exits-every1", width=0.25).eval()
    load_backbone(every1, resnet.respace(plain.state_dict(), "resnet56-exits-every1"))
    torch.testing.assert_close(every1(x).logits["exit27"], plain(x).logits["exit3"])


def test_grid_exits_pool_a_grid_of_positions_and_keep_the_plain_net_as_the_deepest_path():
    net = resnet.build("resnet20-exits-every1-grid4")
    plain = resnet.build("resnet20-exits-every1")
    # the early heads read 4 × 4 = 16 averages per channel, the routers one; the deepest head is the plain net's
    assert [net.macs[f"exit{k}"] for k in (1, 4, 7, 9)] == [16 * 16 * 10, 32 * 16 * 10, 64 * 16 * 10, 64 * 10]
    assert net.nodes["seg4"].router.layers[0].in_features == 32 and net.router_macs == plain.router_macs
    assert net.macs["seg5"] == plain.macs["seg5"], "pooling is not a multiply-accumulate"
    assert resnet.build("resnet20-exit4-every1-grid2").leaf_path_macs == [plain.path_macs("exit4") - sum(
        plain.router_macs[f"seg{k}"] for k in range(1, 5)) - 32 * 10 + 32 * 4 * 10]
    x = varied_images(2)
    state = net.nodes["seg1"].transform.eval()(x)  # stage 1's map, 16 × 32 × 32
    cell = state[:, :, :8, 8:16].mean((2, 3))  # row 0, column 1 of the 4 × 4 grid
    torch.testing.assert_close(net.nodes["exit1"].transform.pool(state).view(2, 16, 4, 4)[:, :, 0, 1], cell)
    torch.testing.assert_close(net.nodes["seg1"].descriptor(state), state.mean((2, 3)), msg="routers read the global average")
    # a plain trunk loads: its head becomes the deepest exit; the early grid heads are new
    trunk = resnet.build("resnet20", width=1).eval()
    new = load_backbone(net.eval(), resnet.respace(trunk.state_dict(), "resnet20-exits-every1-grid4", like=net.state_dict()))
    assert {key.split(".")[1] for key in new} == {f"exit{k}" for k in range(1, 9)} | {f"seg{k}" for k in range(1, 9)}
    torch.testing.assert_close(net(x).logits["exit9"], trunk(x).logits["exit3"])
    with pytest.raises(ValueError, match="reads the global average at every grid; name it resnet20-every1"):
        resnet.build("resnet20-every1-grid4")
    with pytest.raises(ValueError, match="grid is the side"):
        resnet.resnet(20, grid=0)


def test_respace_with_like_leaves_out_heads_of_another_grid_and_keeps_the_routers():
    torch.manual_seed(0)
    stages = resnet.build("resnet20-exits", width=0.25)  # global heads after blocks 3, 6, 9
    target = resnet.build("resnet20-exits-every3-grid2", width=0.25)
    state = resnet.respace(stages.state_dict(), "resnet20-exits-every3-grid2", like=target.state_dict())
    assert not {key for key in state if key.startswith(("nodes.exit1.", "nodes.exit2."))}
    assert "nodes.seg1.router.layers.0.weight" in state, "a router reads the global average at every grid"
    assert "nodes.exit3.transform.linear.weight" in state, "the deepest head reads the global average at every grid"
    with pytest.raises(ValueError, match="another width or number of classes"):  # without like, the shapes clash
        load_backbone(target, resnet.respace(stages.state_dict(), "resnet20-exits-every3-grid2"))


def test_respace_refuses_what_is_not_a_resnet_chain():
    with pytest.raises(ValueError, match="resnetD-exits"):
        resnet.respace(resnet.build("resnet20").state_dict(), "resnet20")
    with pytest.raises(ValueError, match="no blocks under nodes.seg1"):
        resnet.respace({"nodes.col1.weight": torch.zeros(1)}, "resnet20-exits")
    with pytest.raises(ValueError, match="'extra.weight' is not a node"):
        resnet.respace({**resnet.build("resnet20").state_dict(), "extra.weight": torch.zeros(1)}, "resnet20-exits")


@pytest.mark.parametrize("arch, exits", [("resnet32-exits", 3), ("resnet20-exits-every1", 9)])
def test_routed_execution_matches_full_evaluation(arch, exits):
    torch.manual_seed(0)  # random routers spread a batch over 2 of 3 exits for some initialisations
    net = resnet.build(arch, width=0.5, classes=3)
    assert len(net.leaves) == exits
    x = varied_images(32)
    randomize_routers(net, x)
    net.eval()
    routed = dynamic(net, x)
    assert len(set(routed.leaf.tolist())) > min(exits - 1, 2), "the randomised routers spread the batch"
    full = net(x)
    for i, leaf in enumerate(routed.leaf.tolist()):
        torch.testing.assert_close(routed.logits[i], full.logits[net.leaves[leaf]][i], rtol=1e-4, atol=1e-5)
        assert routed.macs[i] == net.leaf_path_macs[leaf]


@pytest.mark.parametrize("arch, words", [
    ("resnet21-exits", r"depth 6n \+ 2"), ("resnet20-exit4", "with exits has exit1 to exit3"), ("resnet", "unknown ResNet arch"),
    ("resnet56-exit10-every3", "with exits every 3 blocks has exit1 to exit9"), ("resnet20-exits-every10", "1 to 9 for ResNet-20"),
    ("resnet20-every", "optionally ending in -everyB"),
])
def test_bad_names_are_refused_with_the_fix(arch, words):
    with pytest.raises(ValueError, match=words):
        resnet.build(arch)


def test_bad_widths_and_exit_spacing_are_refused():
    with pytest.raises(ValueError, match="positive channel multiplier"):
        resnet.resnet(20, width=0)
    with pytest.raises(ValueError, match="1 to 9 for ResNet-20"):
        resnet.resnet(20, exit_every=10)
    with pytest.raises(ValueError, match="static net without routers"):
        resnet.build("resnet20", k_cpt_input=True)


def test_the_image_tasks_offer_the_resnets_and_their_static_paths():
    task = ImageTask("hybrid")
    assert {"resnet20-exits", "resnet32-exits", "resnet56-exits"} <= set(task.archs)
    assert {"resnet20", "resnet20-exit1", "resnet56-exit2"} <= set(task.static_archs())
    assert "resnet20-exits" not in task.static_archs()
    every = {"resnet20-exits-every1", "resnet32-exits-every1", "resnet56-exits-every1", "resnet56-exits-every3"}
    assert every <= set(task.archs) and not every & set(task.static_archs())
    assert {"resnet20-exits-grid4", "resnet56-exits-every3-grid2"} <= set(task.archs)
    assert {"resnet20-exit2-grid4", "resnet20-exit8-every1-grid2"} <= set(task.static_archs())
    assert "resnet20-grid4" not in task.all_archs(), "the plain net has no grid"
    assert {"resnet56-every3", "resnet56-exit8-every3", "resnet20-exit8-every1"} <= set(task.static_archs())
    assert "resnet56-exit9-every3" not in task.all_archs(), "the deepest path is the plain resnet56-every3"
    assert task.make_net("resnet56-exit2-every3", width=0.25).leaf_path_macs == resnet.build("resnet56-exit2-every3", width=0.25).leaf_path_macs
    net = task.make_net("resnet20-exits", seed=1, exit_confidence=True)
    assert net.exit_confidence and net.nodes["seg1"].router.layers[0].in_features == 16 + 1


LEARNERS = {
    "static": ["--agent", "static", "--arch", "resnet20"],
    "actor": ["--agent", "actor"],
    "pragmatic-critic": ["--agent", "pragmatic-critic", "--policy", "eps-greedy", "--execution", "sampled"],
    "optimistic-critic": ["--agent", "optimistic-critic", "--execution", "full"],
    "threshold": ["--agent", "threshold"],
    "dqn": ["--agent", "dqn", "--n-envs", "8", "--iterations", "3", "--eval-every", "2"],
}
"""One of each kind of learner; DQN (through SB3, about 20 s here) in the slow suite."""


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "resnet-cache"))


def train_on_tiny_cifar(tiny_data, logdir, capsys, *flags: str) -> dict:
    """Two smoke iterations of a ResNet on the tiny CIFAR-10 through the command line; the run's metrics."""
    args = ["--env", "routing_rl/CIFAR10Routing-v0", "--arch", "resnet20-exits", "--k-cpt", "4e-9", "--preset", "smoke",
            "--iterations", "2", "--batch-size", "8", "--eval-every", "1", "--eval-examples", "8",
            "--validation-fraction", "0.4", "--data-dir", str(tiny_data), "--download", "false", "--device", "cpu",
            "--logdir", str(logdir), "--run-name", "run", "--json", *flags]
    assert main(args) == 0
    capsys.readouterr()
    metrics = json.loads((logdir / "run" / "metrics.json").read_text())
    assert 0 <= metrics["test_accuracy"] <= 1
    return metrics


@pytest.mark.parametrize("learner", [pytest.param(name, marks=(pytest.mark.slow,) if name == "dqn" else ()) for name in LEARNERS])
def test_every_learner_trains_resnet20_exits_on_an_image_task(learner, tiny_data, tmp_path, capsys, cache):
    logdir = tmp_path / "runs"
    metrics = train_on_tiny_cifar(tiny_data, logdir, capsys, *LEARNERS[learner])
    config, task, net = load_run(logdir / "run")
    if learner == "static":
        assert config.arch == "resnet20" and net.leaves == ["exit3"] and not net.junctions
    else:
        assert config.arch == "resnet20-exits" and net.leaves == ["exit1", "exit2", "exit3"]
        assert list(metrics["test"][0]["heads_alone"]) == ["exit1", "exit2", "exit3"]
    again = evaluate(net, task.dataset().test, config.k_cpt, classes=task.classes, sources=task.sources, task=task)
    assert 0 <= again["accuracy"] <= 1 and again["mean_macs"] <= net.leaf_path_macs[-1]


@pytest.mark.parametrize("flags, leaves", [
    (["--agent", "actor", "--arch", "resnet20-exits-every1"], [f"exit{k}" for k in range(1, 10)]),
    (["--agent", "static", "--arch", "resnet20-exit2-every1"], ["exit2"]),
])
def test_the_command_line_trains_resnets_with_an_exit_every_block(flags, leaves, tiny_data, tmp_path, capsys, cache):
    train_on_tiny_cifar(tiny_data, tmp_path / "runs", capsys, *flags)
    config, _, net = load_run(tmp_path / "runs" / "run")
    assert config.arch == flags[-1] and net.leaves == leaves


def test_an_unknown_arch_names_the_learners_kind_of_net_and_not_all_of_them():
    task = ImageTask("cifar10", download=False)
    static, everything = task.static_archs(), task.all_archs()
    with pytest.raises(ValueError, match=r"choose one of static-1, .* and \d+ more \(--help\)$") as error:
        TrainConfig(agent="static", env="routing_rl/CIFAR10Routing-v0", arch="resnet99").validate(everything, static)
    assert "-exits" not in str(error.value), "the static agent is offered nets without junctions only"
    with pytest.raises(ValueError, match="unknown arch 'resnet99'; choose one of chain, tree, resnet20-exits") as error:
        TrainConfig(agent="actor", env="routing_rl/CIFAR10Routing-v0", arch="resnet99").validate(everything, static)
    assert "static-1" not in str(error.value) and "resnet56-exits-every3" in str(error.value)
