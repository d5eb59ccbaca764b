import math

import pytest
import torch

from routing_rl.training.sgd import training_policy
from routing_rl.training.config import PRESET_VALUES, make_config
from routing_rl.core.execution import Junction
from routing_rl.core.policies import (
    TrainingPolicy,
    eps_greedy_probabilities,
    floored,
    greedy_probabilities,
    halving,
    sample,
    softmax_probabilities,
)

SCORES = torch.tensor([[1.0, 3.0, 2.0], [0.0, 0.0, -5.0]])


@pytest.mark.parametrize("preset", sorted(PRESET_VALUES))
def test_every_preset_halves_tau_with_the_learning_rate(preset):
    # a policy that hardens faster than the columns slow down commits before its heads are trained
    # (docs/suite.md, "Both schedules over three seeds on all sixteen cells")
    config = make_config(preset, agent="actor")
    assert config.options.tau_half_life == config.lr_half_life


def test_halving_is_continuous():
    assert halving(0.1, 0, 500) == 0.1
    assert halving(0.1, 500, 500) == pytest.approx(0.05)
    assert halving(0.1, 250, 500) == pytest.approx(0.1 / math.sqrt(2))
    assert halving(1.0, 80_000, 10_000) == pytest.approx(2**-8)


def test_policy_probabilities():
    torch.testing.assert_close(softmax_probabilities(SCORES, 0.5), torch.softmax(SCORES * 2, 1))
    assert greedy_probabilities(SCORES).tolist() == [[0, 1, 0], [1, 0, 0]]
    torch.testing.assert_close(
        eps_greedy_probabilities(SCORES, 0.3), torch.tensor([[0.1, 0.8, 0.1], [0.8, 0.1, 0.1]])
    )
    torch.testing.assert_close(floored(torch.tensor([[1.0, 0.0]]), 0.1), torch.tensor([[0.95, 0.05]]))


@pytest.mark.parametrize("name", ["softmax", "eps-greedy", "greedy"])
def test_training_probabilities_are_floored_distributions(name):
    policy = TrainingPolicy(name, start=0.01, half_life=10, floor=1e-3)
    p = policy.probabilities(torch.tensor([[100.0, -100.0, 0.0]]), iteration=30)
    torch.testing.assert_close(p.sum(1), torch.ones(1))
    assert p.min() >= 1e-3 / 3 * (1 - 1e-6), "no sink may have zero probability"


def test_schedules_and_their_charts():
    softmax = TrainingPolicy("softmax", start=1.0, half_life=100)
    assert softmax.charts(100) == {"charts/tau": pytest.approx(0.5)}
    eps = TrainingPolicy("eps-greedy", start=0.2, half_life=100)
    assert eps.charts(200) == {"charts/epsilon": pytest.approx(0.05)}
    assert TrainingPolicy("greedy").charts(5) == {}


def test_policy_arguments_are_checked():
    with pytest.raises(ValueError, match="unknown routing policy"):
        TrainingPolicy("boltzmann")
    with pytest.raises(ValueError, match="floor"):
        TrainingPolicy("softmax", floor=0.0)
    with pytest.raises(ValueError, match="tau"):
        TrainingPolicy("softmax", start=0.0)


def test_config_policies():
    assert training_policy(make_config("smoke", agent="actor")) == TrainingPolicy("softmax", 1.0, 10, 1e-6)
    assert training_policy(make_config("smoke", agent="critic")).start == 0.1
    eps = training_policy(make_config("smoke", agent="critic", policy="eps-greedy", epsilon=0.3))
    assert (eps.name, eps.start) == ("eps-greedy", 0.3)


def _junction(scores):
    return Junction("j", scores, scores, None, torch.arange(len(scores)))


def test_sampler_is_reproducible_and_follows_the_probabilities():
    policy = TrainingPolicy("softmax", start=1.0)
    scores = torch.tensor([[0.0, math.log(3.0)]]).expand(40_000, 2).requires_grad_()
    draws = [sample(policy, 0, torch.Generator().manual_seed(7))(_junction(scores)) for _ in range(2)]
    assert torch.equal(draws[0], draws[1])
    assert draws[0].dtype == torch.int64 and not draws[0].requires_grad
    assert draws[0].float().mean().item() == pytest.approx(0.75, abs=0.01)


def test_greedy_sampler_takes_the_argmax():
    decide = sample(TrainingPolicy("greedy", floor=1e-9), 0, torch.Generator().manual_seed(0))
    assert decide(_junction(SCORES)).tolist() == [1, 0]


def test_exploration_follows_a_prior_over_the_sinks():
    prior = torch.tensor([1.0, 3.0, 4.0])
    torch.testing.assert_close(eps_greedy_probabilities(SCORES, 1.0, prior), (prior / 8).expand(2, 3))
    torch.testing.assert_close(eps_greedy_probabilities(SCORES, 0.4, prior)[0], torch.tensor([0.05, 0.75, 0.2]))
    flat = torch.zeros(1, 3)  # equal scores: the softmax is the prior, at any tau
    torch.testing.assert_close(softmax_probabilities(flat, 0.1, prior), (prior / 8)[None])
    sharp = softmax_probabilities(torch.tensor([[0.0, 0.0, 5.0]]), 0.01, prior)
    assert sharp[0, 2] > 0.999, "at a low tau the argmax wins whatever the prior"
    policy = TrainingPolicy("eps-greedy", start=1.0)
    torch.testing.assert_close(policy.probabilities(SCORES, 0, prior).sum(1), torch.ones(2))


@pytest.mark.parametrize("name, start", [("eps-greedy", 0.0), ("eps-greedy", 0.5), ("greedy", 0.0), ("softmax", 0.01)])
def test_a_sink_of_zero_prior_is_no_training_choice_even_where_it_scores_best(name, start):
    scores = torch.tensor([[9.0, 1.0, 2.0], [9.0, 3.0, 1.0]])  # sink 0 (an exit, say) scores best
    prior = torch.tensor([0.0, 1.0, 1.0])
    policy = TrainingPolicy(name, start=start if name != "greedy" else 1.0, floor=1e-6)
    p = policy.probabilities(scores, 0, prior)
    assert (p[:, 0] < 1e-6).all(), "only the floor's share goes to a sink the prior rules out"
    if name != "eps-greedy" or start == 0.0:
        assert p[:, 1:].argmax(1).tolist() == [1, 0], "the best of the remaining sinks"
