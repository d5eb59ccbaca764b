import pytest
import torch
from helpers import randomize_routers, varied_images

from routing_rl.core.costs import error_cost
from routing_rl.data import Split
from routing_rl.training.evaluate import evaluate, heads_alone
from routing_rl.core.execution import dynamic
from routing_rl.nets.multiscale import chain


def test_evaluate_summarises_dynamic_routing():
    x = varied_images(30, 4)
    net = randomize_routers(chain(classes=3), x, 4)
    routed = dynamic(net.eval(), x)
    net.train()
    labels = routed.pred.clone()
    labels[:10] = (labels[:10] + 1) % 3  # the first ten are wrong
    source = torch.arange(30) % 2
    result = evaluate(net, Split(x, labels, source), batch_size=7, classes=("a", "b", "c"))
    assert result["accuracy"] == pytest.approx(20 / 30)
    assert result["mean_macs"] == pytest.approx(routed.macs.double().mean().item())
    assert sum(leaf["count"] for leaf in result["leaves"].values()) == 30
    for i, (name, leaf) in enumerate(result["leaves"].items()):
        here = routed.leaf == i
        assert leaf["count"] == int(here.sum())
        assert sum(leaf["by_class"].values()) == leaf["count"] == sum(leaf["by_source"].values())
        if leaf["count"]:
            assert leaf["accuracy"] == pytest.approx(float((routed.pred == labels)[here].double().mean()))
        else:
            assert leaf["accuracy"] is None
    assert net.training, "evaluate restores the net's mode"


def test_heads_alone_score_every_example_sent_to_each_leaf():
    x = varied_images(30, 4)
    net = randomize_routers(chain(classes=3), x, 4)
    labels = torch.arange(30) % 3
    split = Split(x, labels, torch.arange(30) % 2)
    alone = heads_alone(net, split, batch_size=7)
    assert list(alone) == list(net.leaves)
    for i, leaf in enumerate(net.leaves):
        force = lambda junction, i=i: torch.full((len(junction.scores),), _sink_towards(net, junction.name, net.leaves[i]))
        forced = evaluate(net, split, decide=force)
        assert forced["leaves"][leaf]["count"] == 30
        assert alone[leaf] == {"accuracy": pytest.approx(forced["accuracy"]), "macs": int(net.leaf_macs[i])}
    assert net.training, "heads_alone restores the net's mode"
    clips = Split(torch.stack([x, x], 1), torch.stack([labels, labels], 1), torch.stack([split.source] * 2, 1))
    assert clips.frames == 2 and heads_alone(net, clips) == {}, "sequences: no leaf alone"


def _sink_towards(net, junction: str, leaf: str) -> int:
    """The sink of ``junction`` on the path to ``leaf`` (its last sink, going on, if the leaf is deeper)."""
    return dict(net.path[leaf]).get(junction, len(net.nodes[junction].sinks) - 1)


def test_error_costs():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 0])
    torch.testing.assert_close(error_cost(logits, labels), torch.nn.functional.cross_entropy(logits, labels, reduction="none"))
    assert error_cost(logits, labels, "zero_one").tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="unknown error cost 'hinge'"):
        error_cost(logits, labels, "hinge")
