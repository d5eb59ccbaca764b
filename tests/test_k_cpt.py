import numpy as np
import pytest
import torch

from helpers import vector_tree
from routing_rl.core.k_cpt import (
    K_CPT_UNIT, K_CPT_VALUES, CostModel, KCpt, c_cpt, check_k_cpt, eval_values, expected_c_cpt, router_input,
)


def test_check_k_cpt_parses_numbers_and_dynamic_and_names_bad_values():
    assert check_k_cpt("1.6e-8") == 1.6e-8
    assert check_k_cpt("dynamic") == "dynamic"
    for bad in (-1e-9, "cheap", float("nan"), float("inf"), None, 1e30):
        with pytest.raises(ValueError, match="k_cpt must be"):
            check_k_cpt(bad)


def test_a_fixed_k_cpt_is_constant_and_draws_nothing():
    generator = torch.Generator().manual_seed(3)
    before = generator.get_state()
    k = KCpt(4e-9).sample(5, generator, torch.float64, torch.device("cpu"))
    assert k.tolist() == [4e-9] * 5 and torch.equal(generator.get_state(), before)
    assert eval_values(4e-9) == [4e-9]


def test_a_dynamic_k_cpt_samples_the_paper_values_reproducibly():
    model = KCpt("dynamic")
    draw = lambda: model.sample(200, torch.Generator().manual_seed(1), torch.float64, torch.device("cpu"))
    k = draw()
    assert set(k.tolist()) == set(K_CPT_VALUES) and torch.equal(k, draw())
    episodes = model.sample_numpy(100, np.random.default_rng(0))
    assert set(episodes.tolist()) <= set(K_CPT_VALUES) and len(set(episodes.tolist())) > 4
    assert eval_values("dynamic") == list(K_CPT_VALUES)
    assert model.observed_high == pytest.approx(6.02, abs=0.01)


def test_router_input_moves_by_one_per_doubling_of_k_cpt():
    """Each step of the paper's geometric grid is as far from the next as a unit-scale feature
    varies, so routers can tell the central values apart (the paper's k_cpt × 1e7 put the five
    cheapest within 0.08)."""
    assert K_CPT_UNIT == min(k for k in K_CPT_VALUES if k > 0)
    grid = router_input(torch.tensor(K_CPT_VALUES, dtype=torch.float64))
    assert grid[0] == 0.0 and grid[1] == pytest.approx(1.0)
    assert (grid[2:] - grid[1:-1]).tolist() == pytest.approx([1.0] * 6, abs=0.42)
    assert router_input(4e-9) == pytest.approx(grid[3].item()), "numbers, arrays and tensors read alike"
    assert router_input(np.array(K_CPT_VALUES)) == pytest.approx(grid.numpy())


def test_the_mac_cost_model_is_the_nets_macs_and_c_cpt_is_k_cpt_times_cost():
    net = vector_tree()
    model = CostModel.macs(net)
    assert model.leaf.tolist() == net.leaf_macs.tolist() and model.unit == "MACs"
    assert model.full == net.full_macs
    assert c_cpt(torch.tensor([1e-9, 0.0]), 1_000_000.0).tolist() == pytest.approx([1e-3, 0.0])
    p_leaf = torch.softmax(torch.randn(4, len(net.leaves), generator=torch.Generator().manual_seed(0)), 1).double()
    k_cpt = torch.tensor([0.0, 1e-3, 2e-3, 4e-3], dtype=torch.float64)
    by_hand = sum(float(p_leaf[b, i] * k_cpt[b] * model.leaf[i]) for b in range(4) for i in range(len(net.leaves))) / 4
    assert float(expected_c_cpt(p_leaf, k_cpt, model.leaf)) == pytest.approx(by_hand)


def test_a_cost_model_needs_every_node_and_sane_costs():
    net = vector_tree()
    costs = {name: 1.0 for name in net.order}
    model = CostModel(net, costs, unit="MAC-equivalents")
    assert model.leaf.tolist() == [len(net.nodes_to(leaf)) for leaf in net.leaves]
    with pytest.raises(ValueError, match="no cost for nodes"):
        CostModel(net, {name: 1.0 for name in net.order[1:]})
    with pytest.raises(ValueError, match="finite numbers >= 0"):
        CostModel(net, {**costs, "root": float("nan")})
