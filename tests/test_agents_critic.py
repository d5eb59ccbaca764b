import json
import math

import pytest
import torch
from helpers import flat_config, vector_tree
from torch import nn

from routing_rl.agents.actor import ActorLearner
from routing_rl.agents.critic import CriticLearner, full_targets, sampled_targets
from routing_rl.training.config import TrainConfig, make_config
from routing_rl.training.sgd import training_policy
from routing_rl.data import Split
from routing_rl.core.execution import argmax_decide, dynamic, route
from routing_rl.core.graph import FullOutput, Node, RoutedNet
from routing_rl.nets.multiscale import chain, tree
from routing_rl.nets.router import Router

CPU = torch.device("cpu")


def three_leaf_tree() -> RoutedNet:
    """root -> (leaf0, fork); fork -> (leaf1, leaf2)."""
    nodes = {
        "root": Node(nn.Linear(2, 2), ["leaf0", "fork"], Router(2, 2)),
        "leaf0": Node(nn.Linear(2, 3)),
        "fork": Node(nn.Linear(2, 2), ["leaf1", "leaf2"], Router(2, 2)),
        "leaf1": Node(nn.Linear(2, 3)),
        "leaf2": Node(nn.Linear(2, 3)),
    }
    return RoutedNet(nodes, root="root", input_shape=(2,), classes=3)


ERRORS = torch.tensor([[0.5, 0.2, 0.9], [0.5, 0.2, 0.9]])  # leaf0, leaf1, leaf2
FORK_SCORES = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # example 0 prefers leaf1, example 1 leaf2


def full_output():
    return FullOutput(scores={"root": torch.zeros(2, 2), "fork": FORK_SCORES}, descriptors={}, logits={})


@pytest.mark.parametrize("optimistic", [False, True])
def test_full_targets_without_computation_cost(optimistic):
    net = three_leaf_tree()
    u = full_targets(net, full_output(), ERRORS, torch.zeros(2), optimistic)
    torch.testing.assert_close(u["fork"], torch.tensor([[-0.2, -0.9], [-0.2, -0.9]]))
    # pragmatic: below fork, example 1 would follow its argmax to leaf2 (0.9); optimistic: the best, leaf1
    expected_root = [[-0.5, -0.2], [-0.5, -0.2 if optimistic else -0.9]]
    torch.testing.assert_close(u["root"], torch.tensor(expected_root))


def test_full_targets_count_the_subtree_computation():
    net = three_leaf_tree()
    k = torch.tensor([1e-2, 2e-2])
    m = {name: net.macs[name] + net.router_macs[name] for name in net.order}
    u = full_targets(net, full_output(), ERRORS, k, optimistic=False)
    for i in range(2):
        ki = float(k[i])
        leaf1, leaf2 = 0.2 + ki * m["leaf1"], 0.9 + ki * m["leaf2"]
        assert u["fork"][i].tolist() == pytest.approx([-leaf1, -leaf2])
        below_fork = ki * m["fork"] + (leaf1 if i == 0 else leaf2)
        assert u["root"][i].tolist() == pytest.approx([-(0.5 + ki * m["leaf0"]), -below_fork])


def routed_along(net, x, decisions):
    return route(net.eval(), x, lambda at: torch.tensor([decisions[at.name][i] for i in at.index.tolist()]))


@pytest.mark.parametrize("optimistic", [False, True])
def test_sampled_targets_bootstrap_where_the_path_leaves_the_argmax(optimistic):
    net = three_leaf_tree()
    with torch.no_grad():
        fork_router = net.nodes["fork"].router.layers[-1]
        fork_router.bias.copy_(torch.tensor([-0.3, -0.7]))  # fork scores: leaf1 -0.3 (argmax), leaf2 -0.7
    x = torch.rand(3, 2)
    # example 0 exits at leaf0; example 1 takes fork -> leaf1 (argmax); example 2 fork -> leaf2
    routed = routed_along(net, x, {"root": [0, 1, 1], "fork": [None, 0, 1]})
    errors = torch.tensor([0.5, 0.2, 0.9])
    u = sampled_targets(net, routed, errors, torch.zeros(3), optimistic)
    assert routed.visits["fork"].tolist() == [1, 2]
    assert u["fork"][1].tolist() == [[True, False], [False, True]], "only the taken sink is observed"
    torch.testing.assert_close(u["fork"][0][u["fork"][1]], torch.tensor([-0.2, -0.9]))
    # example 1: observed 0.2 below fork; example 2: pragmatic bootstraps argmax leaf1's
    # estimate (0.3), optimistic takes min(observed 0.9, estimated 0.3)
    torch.testing.assert_close(u["root"][0][u["root"][1]], torch.tensor([-0.5, -0.2, -0.3]))


@pytest.mark.parametrize("optimistic", [False, True])
def test_side_heads_observe_every_exit_on_the_path(optimistic):
    net = three_leaf_tree()
    with torch.no_grad():
        net.nodes["fork"].router.layers[-1].bias.copy_(torch.tensor([-0.3, -0.7]))
    x = torch.rand(3, 2)
    decisions = {"root": [0, 1, 1], "fork": [None, 0, 1]}
    routed = route(net.eval(), x, lambda at: torch.tensor([decisions[at.name][i] for i in at.index.tolist()]), side_heads=True)
    plain = routed_along(net, x, decisions)
    torch.testing.assert_close(routed.logits, plain.logits)
    assert routed.leaf.tolist() == plain.leaf.tolist() and routed.macs.tolist() == plain.macs.tolist()
    full = net(x)
    for leaf, examples in {"leaf0": [0, 1, 2], "leaf1": [1, 2], "leaf2": [1, 2]}.items():
        index, logits = routed.heads[leaf]
        assert index.tolist() == examples, f"{leaf} runs on every example at its junction"
        torch.testing.assert_close(logits, full.logits[leaf][index])
    errors = torch.tensor([0.5, 0.2, 0.9])  # at each example's own leaf
    head_errors = {"leaf0": torch.tensor([0.5, 0.6, 0.7]), "leaf1": torch.tensor([0.2, 0.4]), "leaf2": torch.tensor([0.8, 0.9])}
    targets, observed = sampled_targets(net, routed, errors, torch.zeros(3), optimistic, head_errors)["fork"]
    assert observed.all(), "both of fork's sinks are heads, so both are observed"
    torch.testing.assert_close(targets, -torch.tensor([[0.2, 0.8], [0.4, 0.9]]))
    targets, observed = sampled_targets(net, routed, errors, torch.zeros(3), optimistic, head_errors)["root"]
    assert observed.tolist() == [[True, False], [True, True], [True, True]]
    # below fork: pragmatic follows fork's argmax (leaf1: 0.2, 0.4); optimistic the best, leaf1 too
    torch.testing.assert_close(targets[1:], -torch.tensor([[0.6, 0.2], [0.7, 0.4]]))
    assert targets[0, 0].item() == pytest.approx(-0.5)


def test_sampled_targets_equal_the_exact_ones_on_argmax_paths():
    torch.manual_seed(0)
    net = vector_tree().eval()
    with torch.no_grad():
        for name in net.junctions:
            net.nodes[name].router.layers[-1].weight.normal_()
    x, k = torch.rand(32, 6), torch.full((32,), 1e-4)
    labels = torch.randint(0, 3, (32,))
    out = net(x)
    errors = torch.stack([nn.functional.cross_entropy(out.logits[leaf], labels, reduction="none") for leaf in net.leaves], 1)
    exact = full_targets(net, out, errors, k, optimistic=False)
    routed = route(net, x, argmax_decide)
    sampled = sampled_targets(net, routed, errors.gather(1, routed.leaf[:, None]).squeeze(1), k, optimistic=False)
    assert len(sampled) == 2
    for j, (u, observed) in sampled.items():
        index = routed.visits[j]
        assert (observed.sum(1) == 1).all()
        torch.testing.assert_close(u[observed], exact[j][index].gather(1, routed.decisions[j][:, None]).squeeze(1))
    routed = route(net, x, argmax_decide, side_heads=True)
    head_errors = {leaf: errors[index, net.leaf_index[leaf]] for leaf, (index, _) in routed.heads.items()}
    sampled = sampled_targets(net, routed, errors.gather(1, routed.leaf[:, None]).squeeze(1), k, False, head_errors)
    for j, (u, observed) in sampled.items():
        torch.testing.assert_close(u[observed], exact[j][routed.visits[j]][observed])


def data(n=16, seed=0, features=6):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    return Split(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long(), torch.zeros(n, dtype=torch.long))


def test_full_critic_routers_learn_only_from_the_regression():
    net = vector_tree()
    learner = CriticLearner(net, make_config("smoke", agent="critic", k_ure=0.0, k_l2=0.0), CPU)
    learner.train_step(data(), 0)
    for name in net.junctions:
        assert all(p.grad is None or p.grad.abs().max() == 0 for p in net.nodes[name].router.parameters())
    learner = CriticLearner(net, make_config("smoke", agent="critic", k_l2=0.0), CPU)
    learner.train_step(data(), 0)
    assert net.nodes["root"].router.layers[-1].weight.grad.abs().max() > 0


def test_head_weight_trains_every_head_of_the_full_tree_and_not_the_routers():
    def step(head_weight):
        torch.manual_seed(0)
        net = vector_tree()
        with torch.no_grad():  # the argmax, and ε-greedy's exploitation, send every image to leafA
            net.nodes["root"].router.layers[-1].bias.copy_(torch.tensor([50.0, -50.0, -50.0]))
        config = make_config("smoke", agent="critic", policy="greedy", head_weight=head_weight, k_ure=0.0, k_l2=0.0)
        learner = CriticLearner(net, config, CPU)
        terms = learner.losses(data(), 0)
        leafd = torch.autograd.grad(terms["c_err"] + terms["c_heads"], net.nodes["leafD"].transform.weight)[0]
        return leafd.norm().item(), terms, learner

    unreached, _, _ = step(0.0)
    trained, terms, learner = step(0.5)
    assert unreached < 1e-4 < trained
    out = learner.net(data().images)
    every_head = sum(torch.nn.functional.cross_entropy(out.logits[leaf], data().labels) for leaf in learner.net.leaves)
    assert terms["c_heads"].item() == pytest.approx(0.5 * every_head.item(), rel=1e-5)
    logged = learner.train_step(data(), 0)
    assert "losses/c_heads" in logged
    for name in learner.net.junctions:  # k_ure 0: the routers still learn only from the regression
        assert all(p.grad is None or p.grad.abs().max() == 0 for p in learner.net.nodes[name].router.parameters())
    with pytest.raises(ValueError, match="--head-weight trains every head on every image of the full tree"):
        make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", head_weight=1.0)


def test_zero_one_utility_uses_classification_error():
    net = vector_tree()
    config = make_config("smoke", agent="optimistic-critic", k_cpt=0.0, utility_error="zero_one")
    learner = CriticLearner(net, config, CPU, optimistic=True)
    targets = learner.losses(data(), 0)["targets"]
    assert set(torch.unique(targets["fork"]).tolist()) <= {0.0, -1.0}


@pytest.mark.parametrize("side_heads", [False, True])
def test_sampled_mode_computes_only_the_sampled_path(side_heads):
    net = chain(classes=3)
    seen: dict[str, int] = {}

    def count(name):
        def hook(module, inputs, output):
            state = output.state[-1] if isinstance(output.state, list) else output.state
            seen[name] = seen.get(name, 0) + len(state)
        return hook

    for name in net.order:
        net.nodes[name].register_forward_hook(count(name))
    config = make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", epsilon=1.0,
                         side_heads=side_heads, exploration="sink")
    learner = CriticLearner(net, config, CPU)
    x = torch.rand(8, 3, 32, 32)
    stats = learner.train_step(Split(x, torch.randint(0, 3, (8,)), torch.zeros(8, dtype=torch.long)), 0)
    assert seen["col1"] == 8
    heads_run = sum(seen.get(leaf, 0) for leaf in net.leaves)
    if side_heads:  # every example at a column's junction runs that column's exit head
        assert heads_run == sum(seen.get(f"col{k}", 0) for k in range(1, 9))
        assert all(net.nodes[f"exit{k}"].transform.linear.weight.grad is not None for k in range(1, 9) if f"col{k}" in seen)
    else:
        assert heads_run == 8, "each example reaches exactly one head"
    assert sum(seen.get(f"col{k}", 0) for k in range(1, 9)) < 8 * 8 / 2
    for name in net.order:
        grads = [p.grad for p in net.nodes[name].parameters() if p.grad is not None]
        if name not in seen:  # only c_mod reaches it, weighted by the 0 examples through it
            assert all(g.abs().max() == 0 for g in grads), f"{name} was not sampled, so it gets no gradient"
    assert stats["charts/epsilon"] == 1.0


@pytest.mark.parametrize("policy", ["softmax", "eps-greedy"])
def test_critic_learns_to_take_the_cheap_exit_when_computation_is_expensive(policy):
    torch.manual_seed(0)
    net = vector_tree()
    config = make_config("smoke", agent="critic", policy=policy, k_cpt=2e-2, lr=0.05, lr_half_life=1000,
                         tau_half_life=1000, epsilon=0.5, epsilon_half_life=1000, k_ure=0.1)
    learner = CriticLearner(net, config, CPU)
    batch = data(64)
    for i in range(300):
        learner.train_step(batch, i)
    leaves = dynamic(net.eval(), batch.images).leaf
    assert (leaves == net.leaf_index["leafA"]).float().mean() > 0.9, "the 504-MAC exit costs least"


def test_eps_greedy_critics_default_to_the_full_tree_and_annealed_exploration_from_one():
    config = make_config("quick", agent="critic", policy="eps-greedy")
    assert config.agent == "pragmatic-critic" and config.options.execution == "full"
    assert make_config("quick", agent="critic", policy="eps-greedy", execution="sampled").options.side_heads
    policy = training_policy(config)
    assert policy.value(0) == 1.0 and policy.value(config.options.epsilon_half_life) == pytest.approx(0.5)
    assert make_config("quick", agent="optimistic-critic", policy="eps-greedy").options.epsilon == 1.0
    assert make_config("quick", agent="dqn", policy="eps-greedy").options.epsilon == 0.1, "DQN's is its final rate"
    assert make_config("quick", agent="critic", policy="eps-greedy", epsilon=0.2).options.epsilon == 0.2


def resolved_of(config):
    options = config.options
    return options.head_weight, options.lr, options.utility_error, options.router_lr_scale


def test_full_tree_critics_train_every_head_at_the_thresholds_rate_and_value_exits_by_the_0_1_error_by_default():
    def resolved(**fields):
        return resolved_of(make_config("quick", **fields))

    assert resolved(agent="critic", policy="eps-greedy") == (1.0, 0.02, "zero_one", 100.0)
    assert resolved(agent="optimistic-critic", policy="greedy") == (1.0, 0.02, "zero_one", 100.0)
    # sampled, deep exploration (the default) trains every head a path passes: the full tree's rates
    assert resolved(agent="critic", policy="eps-greedy", execution="sampled") == (0.0, 0.02, "zero_one", 100.0)
    assert make_config("quick", agent="critic", execution="sampled").options.exploration == "deep"
    assert make_config("quick", agent="critic").options.exploration == "sink"
    paper = make_config("quick", agent="critic", policy="eps-greedy", execution="sampled", exploration="sink")
    assert resolved_of(paper) == (0.0, 0.1, "cross_entropy", 1.0), "the paper's sampled critic"
    no_side_heads = make_config("quick", agent="critic", execution="sampled", side_heads=False).options
    assert (no_side_heads.exploration, no_side_heads.lr) == ("sink", 0.1), "deep exploration prices exits by side heads"
    assert resolved(agent="critic", head_weight=0.0) == (0.0, 0.1, "cross_entropy", 1.0), "the paper's critic"
    assert resolved(agent="critic", lr=0.05) == (1.0, 0.05, "zero_one", 100.0)
    assert resolved(agent="critic", utility_error="cross_entropy", router_lr_scale=5.0) == (1.0, 0.02, "cross_entropy", 5.0)
    actor = make_config("quick", agent="actor").options
    assert (actor.head_weight, actor.lr, actor.router_lr_scale) == (0.0, 0.1, 1.0) and not hasattr(actor, "utility_error")
    actor = make_config("quick", agent="actor", head_weight=1.0).options
    assert (actor.head_weight, actor.lr, actor.router_lr_scale) == (1.0, 0.02, 1.0)
    old = flat_config(make_config("quick", agent="critic"))
    del old["head_weight"]  # a config written before head_weight: heads learned by their routed share, at lr 0.1
    old["utility_error"], old["router_lr_scale"] = "cross_entropy", 1.0  # every config then named both
    migrated = TrainConfig.from_json(json.dumps(old))
    assert resolved_of(migrated) == (0.0, 0.1, "cross_entropy", 1.0)
    old["head_weight"] = None  # a run of the default of 2026-11-27: every head, lr 0.02, utilities in nats, routers at lr
    assert resolved_of(TrainConfig.from_json(json.dumps(old))) == (1.0, 0.02, "cross_entropy", 1.0)
    values = make_config("quick", agent="critic").resolved_values()  # what TensorBoard's hparams and the sweep read
    assert [values[name] for name in ("head_weight", "lr", "utility_error", "router_lr_scale", "tau")] == \
        [1.0, 0.02, "zero_one", 100.0, 0.1]
    with pytest.raises(ValueError, match="unknown utility_error 'hinge'"):
        make_config("quick", agent="critic", utility_error="hinge")
    learner = CriticLearner(vector_tree(), make_config("smoke", agent="critic", k_cpt=0.0), CPU)
    assert set(torch.unique(learner.losses(data(), 0)["targets"]["fork"]).tolist()) <= {0.0, -1.0}, \
        "the default critic's targets are 0/1 errors"


@pytest.mark.parametrize("execution", ["sampled", "full"])
def test_sampled_critics_recompute_batch_norm_statistics_before_evaluation(execution):
    torch.manual_seed(0)
    net = chain(classes=3)
    learner = CriticLearner(net, make_config("smoke", agent="critic", policy="eps-greedy", execution=execution), CPU)
    train = Split(torch.rand(40, 3, 32, 32), torch.randint(0, 3, (40,)), torch.zeros(40, dtype=torch.long))
    norm = net.nodes["col1"].transform.norms[0]
    before = norm.running_mean.clone()
    learner.before_evaluation(train, 0)
    if execution == "full":
        assert torch.equal(norm.running_mean, before), "full-tree training already normalises every node by the whole batch"
        return
    with torch.no_grad():  # every image passes column 1: its statistics are those of all 40 images
        z = net.nodes["col1"].transform.convs[0](train.images)
    torch.testing.assert_close(norm.running_mean, z.mean((0, 2, 3)), rtol=1e-4, atol=1e-5)


def test_a_sampled_critic_normalises_each_node_by_the_population_its_training_policy_sent_it():
    torch.manual_seed(0)
    net = chain(classes=3)
    config = make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", epsilon=1.0,
                         epsilon_half_life=10**6, exploration="leaf")
    learner = CriticLearner(net, config, CPU)
    train = Split(torch.rand(400, 3, 32, 32), torch.randint(0, 3, (400,)), torch.zeros(400, dtype=torch.long))
    norm = net.nodes["col4"].transform.norms[0]
    before = norm.running_mean.clone()
    with torch.no_grad():
        greedy = route(net.eval(), train.images, argmax_decide)
    assert "col4" not in greedy.visits, "untrained, the greedy policy stops every image before column 4"
    learner.before_evaluation(train, 100)
    assert not torch.equal(norm.running_mean, before), \
        "under full exploration column 4 trained on half of the images: its statistics are theirs"


def test_side_heads_are_trained_but_never_charged():
    torch.manual_seed(0)
    net = chain(classes=3)
    config = make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", epsilon=1.0, k_cpt=1e-6)
    learner = CriticLearner(net, config, CPU)
    terms = learner.losses(Split(torch.rand(16, 3, 32, 32), torch.randint(0, 3, (16,)), torch.zeros(16, dtype=torch.long)), 0)
    columns = [learner.paths.node_index[f"col{k}"] for k in range(1, 9)]
    heads = [learner.paths.node_index[f"exit{k}"] for k in range(1, 9)]
    reach = terms["reach"]
    assert torch.equal(reach[:, heads[:7]], reach[:, columns[:7]]), "every column passed runs its exit head"
    path_macs = sum(reach[:, c] * (net.macs[f"col{k + 1}"] + net.router_macs[f"col{k + 1}"]) for k, c in enumerate(columns))
    exits = reach[:, columns].sum(1).long() - 1  # the last column passed is where the example left
    head_macs = torch.tensor([net.macs[f"exit{k + 1}"] for k in range(8)], dtype=reach.dtype)[exits]
    assert float(terms["c_cpt"]) == pytest.approx(1e-6 * float((path_macs + head_macs).mean()), rel=1e-5)


@pytest.mark.parametrize("utility_error, start", [("cross_entropy", -math.log(3)), ("zero_one", -2 / 3)])
def test_critic_scores_start_at_zero_or_at_the_cost_of_a_uniform_guess(utility_error, start):
    x = data().images
    net = vector_tree()
    CriticLearner(net, make_config("smoke", agent="critic", utility_error=utility_error, score_start="guess"), CPU)
    for scores in net.eval()(x).scores.values():
        torch.testing.assert_close(scores, torch.full_like(scores, start))
    net = vector_tree()
    CriticLearner(net, make_config("smoke", agent="critic"), CPU)
    assert all(torch.equal(s, torch.zeros_like(s)) for s in net.eval()(x).scores.values()), "the paper's start"
    with pytest.raises(ValueError, match="score_start"):
        make_config("smoke", agent="critic", score_start="half")


@pytest.mark.parametrize("agent, scale, resolved", [("critic", 1.0, 1.0), ("critic", 10.0, 10.0), ("actor", 3.0, 3.0),
                                                    ("critic", None, 100.0), ("actor", None, 1.0)])
def test_routers_step_at_their_own_learning_rate(agent, scale, resolved):
    torch.manual_seed(0)
    net = vector_tree()
    config = make_config("smoke", agent=agent, momentum=0.0, talr=False, router_lr_scale=scale)
    learner = (ActorLearner if agent == "actor" else CriticLearner)(net, config, CPU)
    before = {name: p.detach().clone() for name, p in net.named_parameters()}
    learner.train_step(data(), 0)
    routers = {name for name, _ in net.named_parameters() if ".router." in name}
    assert routers
    moved = 0
    for name, p in net.named_parameters():
        if p.grad is None or p.grad.abs().max() == 0:
            continue
        expected = before[name] - config.options.lr * (resolved if name in routers else 1.0) * p.grad
        torch.testing.assert_close(p.detach(), expected, msg=name)
        moved += name in routers
    assert moved, "the routers learned"
    with pytest.raises(ValueError, match="router_lr_scale"):
        make_config("smoke", agent=agent, router_lr_scale=0.0)


def test_configs_saved_while_eps_greedy_critics_sampled_keep_sampling():
    saved = flat_config(make_config("smoke", agent="critic", policy="eps-greedy"))
    assert TrainConfig.from_json(json.dumps(saved)).options.execution == "full"
    saved["execution"] = None  # written when None meant the agent's default, and before the full tree was every policy's
    del saved["router_lr_scale"], saved["score_start"]
    assert TrainConfig.from_json(json.dumps(saved)).options.execution == "sampled"
    saved["policy"] = "softmax"
    assert TrainConfig.from_json(json.dumps(saved)).options.execution == "full"


@pytest.mark.parametrize("execution", ["sampled", "full"])
def test_leaf_exploration_reaches_every_exit_of_a_chain_equally_often(execution):
    """Exploring uniformly over sinks, an example reaches column k of the chain with
    probability 2^-(k-1); in proportion to the leaves below each sink, (9 - k)/8."""
    net = chain(classes=3)
    assert [net.nodes[j].sinks for j in net.junctions][0] == ["exit1", "col2"]
    below = {j: c.tolist() for j, c in CriticLearner(net, make_config("smoke", agent="critic"), CPU).paths.leaves_below().items()}
    assert [below[j] for j in net.junctions] == [[1.0, float(8 - k)] for k in range(1, 8)]
    config = make_config("smoke", agent="critic", policy="eps-greedy", execution=execution, epsilon=1.0,
                         exploration="leaf")
    learner = CriticLearner(net, config, CPU)
    images = torch.rand(512, 3, 32, 32)
    reach = learner.losses(Split(images, torch.randint(0, 3, (512,)), torch.zeros(512, dtype=torch.long)), 0)["reach"]
    share = {k: reach[:, learner.paths.node_index[f"col{k}"]].mean().item() for k in (2, 5, 8)}
    tolerance = 0.06 if execution == "sampled" else 1e-4  # sampled: 512 draws; full: the probabilities
    assert share == pytest.approx({k: (9 - k) / 8 for k in share}, abs=tolerance)
    with pytest.raises(ValueError, match="unknown exploration 'depth'; choose one of sink, leaf, deep"):
        make_config("smoke", agent="critic", exploration="depth")


@pytest.mark.parametrize("policy, explore", [("eps-greedy", 1.0), ("eps-greedy", 0.0), ("softmax", 10.0),
                                             ("softmax", 0.01), ("greedy", 0.0)])
def test_deep_exploration_runs_every_column_and_prices_every_exit_it_passes(policy, explore):
    """Deep exploration never sends a training path to an exit, explored or greedy: on the chain
    every example runs all 8 columns, and the side heads observe each junction's exit, so every
    target is observed, as on the full tree."""
    torch.manual_seed(0)
    net = chain(classes=3)
    config = make_config("smoke", agent="critic", policy=policy, execution="sampled", epsilon=min(explore, 1.0),
                         tau=max(explore, 0.01), exploration="deep")
    learner = CriticLearner(net, config, CPU)
    assert [learner.priors[j].tolist() for j in net.junctions] == [[0.0, 1.0]] * 7
    batch = Split(torch.rand(64, 3, 32, 32), torch.randint(0, 3, (64,)), torch.zeros(64, dtype=torch.long))
    terms = learner.losses(batch, 0)
    columns = [learner.paths.node_index[f"col{k}"] for k in range(1, 9)]
    heads = [learner.paths.node_index[f"exit{k}"] for k in range(1, 9)]
    assert terms["reach"][:, columns + heads].eq(1).all(), "every column and every head ran on every example"
    for junction, (_, observed) in terms["targets"].items():
        assert observed.all() and len(observed) == 64, f"{junction}: both sinks observed for every example"


def test_deep_exploration_on_a_tree_samples_one_deepest_path_per_example():
    """On the tree an explored path picks one copy at each 3-way junction and never exits: 8
    columns per example, not the full tree's 47, so sampling keeps what it saves."""
    torch.manual_seed(0)
    net = tree(classes=3)
    config = make_config("smoke", agent="critic", policy="eps-greedy", execution="sampled", epsilon=1.0,
                         epsilon_half_life=10**6, exploration="deep", arch="tree")
    learner = CriticLearner(net, config, CPU)
    assert learner.priors["col1"].tolist() == [0.0, 1.0, 1.0], "exit, or either copy of column 2"
    fork = CriticLearner(three_leaf_tree(), make_config("smoke", agent="critic", execution="sampled"), CPU).priors
    assert [fork[j].tolist() for j in ("root", "fork")] == [[0.0, 1.0], [1.0, 1.0]], "only exits: each is deepest"
    batch = Split(torch.rand(64, 3, 32, 32), torch.randint(0, 3, (64,)), torch.zeros(64, dtype=torch.long))
    reach = learner.losses(batch, 0)["reach"]
    columns = [k for name, k in learner.paths.node_index.items() if name.startswith("col")]
    assert len(columns) == 47
    assert reach[:, columns].sum(1).eq(8).all(), "one column per depth, down to column 8"
    copies = [learner.paths.node_index[name] for name in ("col2a", "col2b")]
    assert 0 < reach[:, copies[0]].sum() < 64 and reach[:, copies].sum() == 64, "either copy of column 2, at random"


def test_deep_exploration_needs_the_side_heads():
    with pytest.raises(ValueError, match="side heads: drop --side-heads false, or use --exploration leaf"):
        make_config("smoke", agent="critic", execution="sampled", exploration="deep", side_heads=False)
