"""--channels-last, --compile and --cuda-graphs: their training steps equal eager ones on a tiny convolutional tree."""

import copy

import pytest
import torch
from torch import nn

from routing_rl.agents.actor import ActorLearner
from routing_rl.core.graph import Node, RoutedNet
from routing_rl.data import Split
from routing_rl.nets.router import Router
from routing_rl.training.acceleration import accelerate, begin_step, compiler_missing, flush_denormals
from routing_rl.training.config import make_config

CPU = torch.device("cpu")


def tiny_conv_tree() -> RoutedNet:
    """root (conv, BN, ReLU, max pool) -> exit head, or one more conv block -> head."""

    def block(c_in: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(c_in, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2))

    def head() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

    nodes = {
        "root": Node(block(3), ["exit", "deeper"], Router(64, 2)),
        "exit": Node(nn.Sequential(nn.Flatten(), nn.Linear(64, 3))),
        "deeper": Node(block(4), ["last"]),
        "last": Node(head()),
    }
    return RoutedNet(nodes, root="root", input_shape=(3, 8, 8), classes=3)


def batch(seed: int) -> Split:
    generator = torch.Generator().manual_seed(seed)
    return Split(torch.rand(16, 3, 8, 8, generator=generator), torch.randint(3, (16,), generator=generator),
                 torch.zeros(16, dtype=torch.long))


@pytest.mark.parametrize("options", [dict(channels_last=True), dict(channels_last=True, compile=True)],
                         ids=["channels-last", "channels-last+compile"])
def test_accelerated_actor_steps_equal_eager_ones(options):
    reason = compiler_missing(CPU)
    if options.get("compile") and reason:
        pytest.skip(f"torch.compile cannot build CPU kernels here: {reason}")
    torch.manual_seed(0)
    eager_net = tiny_conv_tree()
    compiled_net = accelerate(copy.deepcopy(eager_net), **options)
    assert compiled_net.nodes["root"].transform[0].weight.is_contiguous(memory_format=torch.channels_last)
    config = make_config("smoke", agent="actor", lr=0.01)
    eager, compiled = ActorLearner(eager_net, config, CPU), ActorLearner(compiled_net, config, CPU)
    for iteration in range(3):
        expected = eager.train_step(batch(iteration), iteration)
        got = compiled.train_step(batch(iteration), iteration)
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)
    for (name, p), q in zip(eager_net.named_parameters(), compiled_net.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=lambda text, name=name: f"{name}: {text}")
    assert list(compiled_net.state_dict()) == list(eager_net.state_dict()), "checkpoints are interchangeable"


def test_cuda_graphs_are_refused_without_cuda_and_for_the_env_learners():
    with pytest.raises(RuntimeError, match="needs a CUDA device; this run trains on cpu: drop --cuda-graphs"):
        accelerate(tiny_conv_tree(), cuda_graphs=True)
    assert make_config("smoke", agent="critic", cuda_graphs=True).cuda_graphs
    with pytest.raises(ValueError, match="drop --cuda-graphs"):
        make_config("smoke", agent="dqn", cuda_graphs=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs replay on a CUDA device")
def test_cuda_graph_steps_equal_eager_ones():
    cuda = torch.device("cuda")
    reason = compiler_missing(cuda)
    if reason:
        pytest.skip(f"torch.compile cannot build CUDA kernels here: {reason}")
    torch.manual_seed(0)
    eager_net = tiny_conv_tree().to(cuda)
    graphed_net = accelerate(copy.deepcopy(eager_net), cuda_graphs=True)
    config = make_config("smoke", agent="actor", lr=0.01)
    eager, graphed = ActorLearner(eager_net, config, cuda), ActorLearner(graphed_net, config, cuda)
    for iteration in range(5):  # warm-up, recording, then replays
        step = batch(iteration).to(cuda)
        expected = eager.train_step(step, iteration)
        begin_step(cuda_graphs=True)
        got = graphed.train_step(step, iteration)
        assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)
    for (name, p), q in zip(eager_net.named_parameters(), graphed_net.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-6, msg=lambda text, name=name: f"{name}: {text}")


def test_compile_is_for_the_gradient_learners():
    assert make_config("smoke", agent="actor", compile=True).compile
    with pytest.raises(ValueError, match="drop --compile"):
        make_config("smoke", agent="ppo", compile=True)


def test_a_compiled_column_pools_by_pairwise_maxima_with_eager_gradients():
    """Inside torch.compile a column halves its maps with two pairwise maxima (which inductor
    fuses), eagerly with max_pool2d: the same values, and the same gradients where no two
    maxima tie."""
    reason = compiler_missing(CPU)
    if reason:
        pytest.skip(f"torch.compile cannot build CPU kernels here: {reason}")
    from routing_rl.nets.multiscale import Column

    torch.manual_seed(0)
    eager = Column(in_channels=(3, 3, 3), out_channels=(4, 4, 4), image_input=True)
    compiled = copy.deepcopy(eager)
    x = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    compiled_forward = torch.compile(compiled)

    def loss(outputs):
        return sum((o * torch.linspace(-1, 1, o.numel()).view_as(o)).sum() for o in outputs)

    loss(eager(x)).backward()
    loss(compiled_forward(x)).backward()
    # a bias before batch norm has a zero gradient up to float rounding: compare at the
    # scale of the largest gradient, not element by element
    scale = max(float(p.grad.abs().max()) for p in eager.parameters())
    for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5 * scale, msg=lambda text, name=name: f"{name}: {text}")


TINY = torch.finfo(torch.float32).tiny  # the smallest normal float32


def subnormals_survive() -> bool:
    """Whether a float32 product of subnormal size comes out non-zero on this thread."""
    return (torch.tensor([1e-30]) * torch.tensor([1e-9])).item() != 0


@pytest.fixture
def subnormals_kept():
    """Subnormals computed, as in a fresh process; and so again after the test."""
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals to zero")
    torch.set_flush_denormal(False)
    yield
    torch.set_flush_denormal(False)


def sure_actor_step() -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One actor step on the tiny tree whose router exits with logit margin 100 (the deeper
    path's probability e^-100, under float32's smallest normal): the gradients and weights."""
    torch.manual_seed(0)
    net = tiny_conv_tree()
    last = net.nodes["root"].router.layers[-1]
    with torch.no_grad():
        last.weight.zero_()
        last.bias.copy_(torch.tensor([100.0, 0.0]))
    ActorLearner(net, make_config("smoke", agent="actor", lr=0.01), CPU).train_step(batch(0), 0)
    return ({name: p.grad.clone() for name, p in net.named_parameters() if p.grad is not None},
            {name: p.detach().clone() for name, p in net.named_parameters()})


def test_a_sure_routers_gradient_is_subnormal_until_flushed(subnormals_kept):
    def subnormal(tensors):
        return {name: int(((t.abs() < TINY) & (t != 0)).sum()) for name, t in tensors.items() if ((t.abs() < TINY) & (t != 0)).any()}

    assert subnormals_survive()
    kept_grads, kept_weights = sure_actor_step()
    assert subnormal(kept_grads), "the router's gradient is scaled by the tiny probability of the path it declines"
    flush_denormals()
    assert not subnormals_survive()
    flushed_grads, flushed_weights = sure_actor_step()
    assert not subnormal(flushed_grads)
    for name, weight in kept_weights.items():  # what the subnormals carried is below the weights' rounding
        torch.testing.assert_close(flushed_weights[name], weight, rtol=0, atol=0, msg=name)


def test_a_run_flushes_subnormals_on_the_cpu(subnormals_kept, tiny_data, tmp_path, monkeypatch):
    from routing_rl.app.runs import train

    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    config = make_config("smoke", agent="actor", iterations=2, eval_every=2, checkpoint_every=2, data_dir=str(tiny_data),
                         download=False, validation_fraction=0.4, device="cpu", logdir=str(tmp_path), run_name="run")
    train(config)
    assert not subnormals_survive()
