import pytest
import torch
import torch.nn.functional as F
from helpers import vector_tree

from routing_rl.agents.actor import ActorLearner
from routing_rl.core.paths import Paths
from routing_rl.training.config import make_config
from routing_rl.core.k_cpt import K_CPT_VALUES
from routing_rl.data import Split
from routing_rl.core.execution import dynamic

CPU = torch.device("cpu")


def random_routers(net, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in net.junctions:
            last = net.nodes[name].router.layers[-1]
            last.weight.copy_(torch.randn(last.weight.shape, generator=generator, dtype=last.weight.dtype))
    return net


def synthetic(n=8, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=generator, dtype=dtype)
    return Split(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.zeros(n, dtype=torch.long))


def test_reach_probabilities_are_products_along_paths():
    net = vector_tree()
    p = {"root": torch.tensor([[0.2, 0.3, 0.5]]), "fork": torch.tensor([[0.6, 0.4]])}
    paths = Paths(net)
    reach = paths.reach(p)[0]
    expected = {"root": 1, "leafA": 0.2, "mid": 0.3, "leafB": 0.3, "fork": 0.5, "leafC": 0.3, "leafD": 0.2}
    for name, value in expected.items():
        assert reach[paths.node_index[name]].item() == pytest.approx(value)
    assert paths.leaves(reach[None]).sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("dynamic_k_cpt", [False, True])
def test_expected_cost_equals_the_sum_over_paths(dynamic_k_cpt):
    torch.manual_seed(0)
    net = random_routers(vector_tree(k_cpt_input=dynamic_k_cpt).double())
    config = make_config("smoke", agent="actor", k_cpt="dynamic" if dynamic_k_cpt else 1e-3, tau=0.7,
                         probability_floor=0.01)
    learner = ActorLearner(net, config, CPU)
    data = synthetic()
    generator_state = learner.generator.get_state()
    terms = learner.losses(data, iteration=5)
    learner.generator.set_state(generator_state)
    k_cpt = learner.sample_k_cpt(len(data))
    if dynamic_k_cpt:
        assert set(k_cpt.tolist()) <= set(K_CPT_VALUES) and len(set(k_cpt.tolist())) > 1

    out = net(data.images, k_cpt)
    tau = 0.7 * 0.5 ** (5 / config.options.tau_half_life)
    probs = {j: 0.99 * F.softmax(s / tau, 1) + 0.01 / s.shape[1] for j, s in out.scores.items()}
    err = cpt = dec = 0.0
    for leaf in net.leaves:
        p = torch.ones(len(data), dtype=torch.float64)
        for junction, sink in net.path[leaf]:
            p = p * probs[junction][:, sink]
        err = err + p * F.cross_entropy(out.logits[leaf], data.labels, reduction="none")
        cpt = cpt + p * k_cpt * net.path_macs(leaf)
    reach_fork = probs["root"][:, 2]
    dec = (out.scores["root"].square().sum(1) + reach_fork * out.scores["fork"].square().sum(1)) * config.options.k_dec
    torch.testing.assert_close(terms["c_err"], err.mean())
    torch.testing.assert_close(terms["c_cpt"], cpt.mean())
    torch.testing.assert_close(terms["c_dec"], dec.mean())


def test_c_mod_weights_each_node_by_its_mean_reach_probability():
    net = random_routers(vector_tree().double())
    learner = ActorLearner(net, make_config("smoke", agent="actor"), CPU)
    terms = learner.losses(synthetic(), 0)
    usage = terms["reach"].detach().mean(0)
    expected = 0.0
    for k, name in enumerate(net.order):
        node = net.nodes[name]
        weights = [node.transform.weight if isinstance(node.transform, torch.nn.Linear) else node.transform[0].weight]
        if node.router is not None:
            weights += [layer.weight for layer in node.router.layers if isinstance(layer, torch.nn.Linear)]
        expected = expected + usage[k] * sum(w.square().sum() for w in weights)
    torch.testing.assert_close(terms["c_mod"], 1e-4 * expected)


def test_the_step_adds_the_gradient_of_c_mod_for_the_usage_it_is_given():
    """c_mod's gradient is added after backward(), not back-propagated: one step must move the
    weights exactly as back-propagating the usage-weighted c_mod did, TALR and momentum included."""
    from routing_rl.training.sgd import node_weights

    config = make_config("smoke", agent="actor", k_l2=0.05)
    after = {}
    for way in ("added", "back-propagated", "left out"):
        torch.manual_seed(0)
        net = random_routers(vector_tree().double())
        learner = ActorLearner(net, config, CPU)
        terms = learner.losses(synthetic(), 0)
        loss, usage = terms["c_err"] + terms["c_cpt"] + terms["c_dec"], terms["usage"]
        if way == "back-propagated":
            loss = loss + config.k_l2 * sum(
                usage[k] * sum(w.square().sum() for w in node_weights(net.nodes[name])) for k, name in enumerate(net.order)
            )
        learner.sgd.step(loss, 0, terms["reach"], usage if way == "added" else torch.zeros_like(usage))
        after[way] = {name: p.detach().clone() for name, p in net.named_parameters()}
    for name, value in after["back-propagated"].items():
        torch.testing.assert_close(after["added"][name], value, msg=name)
    assert any(not torch.allclose(after["left out"][n], v) for n, v in after["back-propagated"].items())


def test_c_mod_routing_differentiates_c_mod_through_the_path_probabilities():
    """The paper's "regularizing d̂": the same c_mod value, whose gradient now also reaches
    the routers as that of k_L2 · Σ_nodes mean-reach(node) · Σ w² (weights held constant)."""
    from routing_rl.training.sgd import node_weights

    def router_gradients(c_mod_routing):
        torch.manual_seed(0)
        net = random_routers(vector_tree().double())
        learner = ActorLearner(net, make_config("smoke", agent="actor", k_l2=0.05, c_mod_routing=c_mod_routing), CPU)
        terms = learner.losses(synthetic(), 0)
        net.zero_grad()
        (terms["c_err"] + terms["c_cpt"] + terms["c_dec"] + terms["c_mod"]).backward(retain_graph=True)
        return net, terms, {name: [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                                   for p in net.nodes[name].router.parameters()] for name in net.junctions}

    _, plain, without = router_gradients(False)
    net, regularised, with_ = router_gradients(True)
    torch.testing.assert_close(regularised["c_mod"].detach(), plain["c_mod"])
    usage = regularised["reach"].mean(0)
    squares = torch.stack([sum(w.detach().square().sum() for w in node_weights(net.nodes[name])) for name in net.order])
    expected = torch.autograd.grad(0.05 * (usage * squares).sum(), [p for name in net.junctions
                                                                     for p in net.nodes[name].router.parameters()],
                                   allow_unused=True)
    added = [w - wo for name in net.junctions for w, wo in zip(with_[name], without[name])]
    for got, want in zip(added, expected):
        torch.testing.assert_close(got, torch.zeros_like(got) if want is None else want)
    assert any(g.abs().sum() > 0 for g in added)


def test_c_mod_routing_is_the_actors_option():
    with pytest.raises(ValueError, match="c-mod-routing lets the actor's routers see c_mod's gradient"):
        make_config("smoke", agent="pragmatic-critic", c_mod_routing=True)


def test_gradients_reach_the_routers_through_the_probabilities():
    net = vector_tree().double()
    learner = ActorLearner(net, make_config("smoke", agent="actor", k_dec=0.0, k_l2=0.0), CPU)
    learner.train_step(synthetic(), 0)
    for name in net.junctions:
        assert net.nodes[name].router.layers[-1].weight.abs().sum() > 0


def test_actor_learns_to_take_the_cheap_exit_when_computation_is_expensive():
    torch.manual_seed(0)
    net = vector_tree()
    config = make_config("smoke", agent="actor", k_cpt=5e-3, lr=0.05, lr_half_life=1000, tau_half_life=1000)
    learner = ActorLearner(net, config, CPU)
    data = synthetic(64, dtype=torch.float32)
    first = learner.train_step(data, 0)
    for i in range(1, 150):
        last = learner.train_step(data, i)
    assert last["losses/total"] < first["losses/total"]
    assert set(last) >= {"losses/c_err", "losses/c_cpt", "losses/c_mod", "losses/c_dec", "losses/total",
                         "charts/lr", "charts/tau", "charts/train_accuracy", "charts/train_mean_macs"}
    leaves = dynamic(net.eval(), data.images).leaf
    assert (leaves == net.leaf_index["leafA"]).float().mean() > 0.9, "the 504-MAC exit costs least"


def test_actor_rejects_other_policies_and_nets_without_junctions():
    from routing_rl.nets.multiscale import static

    with pytest.raises(ValueError, match="junctions"):
        ActorLearner(static(1), make_config("smoke", agent="actor"), CPU)


def test_head_weight_trains_the_heads_the_policy_turns_away_from():
    def head_gradient(head_weight):
        torch.manual_seed(0)
        net = vector_tree().double()
        with torch.no_grad():  # the root sends every image to leafA
            net.nodes["root"].router.layers[-1].bias.copy_(torch.tensor([50.0, -50.0, -50.0]))
        config = make_config("smoke", agent="actor", head_weight=head_weight, probability_floor=1e-6)
        terms = ActorLearner(net, config, CPU).losses(synthetic(), iteration=0)
        total = terms["c_err"] + terms["c_heads"]
        return torch.autograd.grad(total, net.nodes["leafD"].transform.weight)[0].norm().item(), terms

    unreached, _ = head_gradient(0.0)
    trained, terms = head_gradient(1.0)
    assert unreached < 1e-5 < trained, "with head_weight 0 a head learns only from the images routed to it"
    assert terms["trained"].min() == 1.0, "every node learns from every image at head_weight 1: TALR leaves it alone"


def test_c_heads_is_every_heads_cross_entropy_times_the_weight():
    net = random_routers(vector_tree().double())
    data = synthetic()
    terms = ActorLearner(net, make_config("smoke", agent="actor", head_weight=0.5), CPU).losses(data, iteration=0)
    out = net(data.images)
    expected = sum(F.cross_entropy(out.logits[leaf], data.labels) for leaf in net.leaves)
    assert terms["c_heads"].item() == pytest.approx(0.5 * expected.item())


@pytest.mark.parametrize("head_weight", [0.0, 1.0])
def test_zero_one_error_teaches_the_routers_and_leaves_the_heads_to_c_heads(head_weight):
    net = random_routers(vector_tree().double())
    data = synthetic(16)
    config = make_config("smoke", agent="actor", error_cost="zero_one", head_weight=head_weight, tau=0.5)
    terms = ActorLearner(net, config, CPU).losses(data, iteration=0)
    heads = [net.nodes[leaf].transform.weight for leaf in net.leaves]
    routers = [net.nodes[j].router.layers[-1].weight for j in net.junctions]
    from_error = torch.autograd.grad(terms["c_err"], heads + routers, allow_unused=True, retain_graph=True)
    assert all(g is None or not g.any() for g in from_error[:len(heads)]), "a 0/1 error has no gradient for the heads"
    assert all(g is not None and g.abs().sum() > 0 for g in from_error[len(heads):])
    assert 0.0 <= terms["c_err"].item() <= 1.0
    # the heads learn what they would with c_err in cross-entropy: their routed share, plus w on every image
    p_leaf = Paths(net).leaves(terms["reach"]).detach()
    cross_entropy = torch.stack([F.cross_entropy(net(data.images).logits[leaf], data.labels, reduction="none")
                                 for leaf in net.leaves], dim=1)
    assert terms["c_heads"].item() == pytest.approx(((p_leaf + head_weight) * cross_entropy).sum(1).mean().item())
    from_heads = torch.autograd.grad(terms["c_heads"], heads + routers, allow_unused=True)
    assert all(g is not None and g.abs().sum() > 0 for g in from_heads[:len(heads)])
    assert all(g is None or not g.any() for g in from_heads[len(heads):]), "the routed share is a weight, not a gradient path"


def test_head_weight_belongs_to_full_tree_learners_and_zero_one_c_err_to_the_actor():
    with pytest.raises(ValueError, match="--head-weight trains every head on every image of the full tree"):
        make_config("smoke", agent="threshold", head_weight=1.0)
    with pytest.raises(ValueError, match="the actor's routers can learn it"):
        make_config("smoke", agent="critic", error_cost="zero_one", head_weight=1.0)
