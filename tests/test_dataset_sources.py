"""RoutingDataset names its sources explicitly: no silent default, no index without a name."""

import pytest
import torch

from routing_rl.data import RoutingDataset, Split


def split(sources: list[int]) -> Split:
    n = len(sources)
    return Split(torch.zeros(n, 4), torch.zeros(n, dtype=torch.long), torch.tensor(sources))


def test_sources_must_be_given():
    with pytest.raises(TypeError, match="sources"):
        RoutingDataset("d", ("a",), split([0]), split([0]), {})


def test_every_source_index_needs_a_name():
    dataset = RoutingDataset("d", ("a",), split([0, 1]), split([1]), {}, ["clear", "noisy"])
    assert dataset.sources == ("clear", "noisy")  # a list is kept as a tuple
    with pytest.raises(ValueError, match=r"train source indices run from 0 to 2, but sources names 2"):
        RoutingDataset("d", ("a",), split([0, 2]), split([0]), {}, ("clear", "noisy"))
    with pytest.raises(ValueError, match=r"test source indices run from -1 to 0"):
        RoutingDataset("d", ("a",), split([0]), split([-1, 0]), {}, ("all",))


@pytest.mark.parametrize("sources", [(), "clear", ("clear", 1)])
def test_sources_are_names(sources):
    with pytest.raises(ValueError, match="sources must be a non-empty tuple of names"):
        RoutingDataset("d", ("a",), split([0]), split([0]), {}, sources)


def test_sequences_name_every_frame_source():
    clips = Split(torch.zeros(2, 3, 4), torch.zeros(2, 3, dtype=torch.long), torch.tensor([[0, 0, 1], [1, 1, 1]]))
    assert RoutingDataset("clips", ("a",), clips, clips, {}, ("cheap", "dear")).train.frames == 3
    with pytest.raises(ValueError, match="but sources names 1"):
        RoutingDataset("clips", ("a",), clips, clips, {}, ("cheap",))


def test_evaluate_names_sources_and_classes_by_the_task():
    from types import SimpleNamespace

    from helpers import vector_tree

    from routing_rl.training.evaluate import evaluate

    net = vector_tree(features=6, classes=3)
    split = Split(torch.randn(12, 6), torch.arange(12) % 3, torch.arange(12) % 3)
    task = SimpleNamespace(classes=("ant", "bee", "cat"), sources=("left", "middle", "right"))
    result = evaluate(net, split, 0.0, task=task)
    for leaf in result["leaves"].values():
        assert list(leaf["by_source"]) == ["left", "middle", "right"] and list(leaf["by_class"]) == ["ant", "bee", "cat"]
    assert sum(leaf["by_source"]["right"] for leaf in result["leaves"].values()) == 4, "no source index is dropped"
    named = evaluate(net, split, 0.0, sources=("a", "b", "c"), task=task)
    assert list(next(iter(named["leaves"].values()))["by_source"]) == ["a", "b", "c"], "given names win"
