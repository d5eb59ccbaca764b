"""A dynamic-k_cpt actor reads its k_cpt: one net whose routing gets cheaper at every step of
the paper's grid (paper, Section 4.6)."""

import pytest
import torch
from helpers import vector_tree
from torch import nn

from routing_rl.agents.actor import ActorLearner
from routing_rl.core.execution import dynamic
from routing_rl.core.graph import Node, RoutedNet
from routing_rl.core.k_cpt import K_CPT_VALUES, CostModel
from routing_rl.data import Split
from routing_rl.nets.router import Router
from routing_rl.training.checkpoint import CheckpointError, load_checkpoint
from routing_rl.training.config import make_config

FEATURES = 8
DEEP_MACS = 1e7
"""What going on costs: k_cpt × DEEP_MACS spans 0 ... 0.64 over the grid, as the paper's
chain's later columns do, against an exit whose cross-entropy spans 0 ... several nats."""


class FixedHead(nn.Module):
    """Logits ``[gain · x0 + bias, 0]`` for two classes, class 0 always right; no weights, so
    only the router learns and every example's cost of exiting is known."""

    def __init__(self, gain: float, bias: float):
        super().__init__()
        self.gain, self.bias = gain, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.gain * x[:, 0] + self.bias, torch.zeros_like(x[:, 0])], 1)


def exit_or_go_on() -> RoutedNet:
    """One junction on unit-scale features: exit (right when x0 is high, wrong when low) or go
    on to a head that is always right. Going on pays off for an example iff its exit's
    cross-entropy softplus(-4 x0) exceeds k_cpt × DEEP_MACS, so the cost-optimal share going on
    falls at every step of the grid (from 100% at k_cpt 0 to about 51% at 6.4e-8)."""
    nodes = {
        "root": Node(nn.Identity(), ["exit", "deep"], Router(FEATURES, 2, k_cpt_input=True)),
        "exit": Node(FixedHead(4.0, 0.0)),
        "deep": Node(FixedHead(0.0, 10.0)),
    }
    return RoutedNet(nodes, root="root", input_shape=(FEATURES,), classes=2, k_cpt_input=True)


def examples(n: int, seed: int) -> Split:
    x = torch.randn(n, FEATURES, generator=torch.Generator().manual_seed(seed))
    return Split(x, torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long))


def test_a_dynamic_k_cpt_actors_macs_fall_at_every_step_of_the_grid():
    torch.manual_seed(0)
    net = exit_or_go_on()
    cost = CostModel(net, {"root": 0.0, "exit": 0.0, "deep": DEEP_MACS})
    config = make_config("smoke", agent="actor", k_cpt="dynamic", batch_size=128,
                         lr_half_life=10**6, tau_half_life=10**6)
    learner = ActorLearner(net, config, torch.device("cpu"), cost)
    for iteration in range(200):
        learner.train_step(examples(128, iteration), iteration)
    test = examples(4000, -1)
    with torch.no_grad():
        macs = [cost.leaf[dynamic(net.eval(), test.images, k_cpt).leaf].mean().item() for k_cpt in K_CPT_VALUES]
    steps = [(cheaper - dearer) / DEEP_MACS for cheaper, dearer in zip(macs, macs[1:])]
    # the cost-optimal share going on falls by 4 to 12.5 points per step; a router that reads
    # k_cpt × 1e7 moves by under 1 point per step among the cheaper half of the grid
    assert min(steps) > 0.01, f"mean MACs per k_cpt {[f'{m / 1e6:.2f}M' for m in macs]}"


def test_a_checkpoint_whose_routers_read_k_cpt_on_the_linear_scale_is_refused(tmp_path):
    """Routers trained on k_cpt × 1e7 would read every k_cpt as a far higher one: refused in
    one line, not loaded into routers that read it on the log scale."""
    net = vector_tree(k_cpt_input=True)
    linear = {name: tensor for name, tensor in net.state_dict().items() if not name.endswith(".k_cpt_unit")}
    assert len(linear) < len(net.state_dict()), "every router that reads k_cpt records its unit"
    torch.save({"learner": {"net": linear}}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"read a dynamic k_cpt as k_cpt × 1e7.*train it again"):
        load_checkpoint(tmp_path / "checkpoint.pt", net=net)
    torch.save({"learner": {"net": net.state_dict()}}, tmp_path / "checkpoint.pt")
    load_checkpoint(tmp_path / "checkpoint.pt", net=net)
