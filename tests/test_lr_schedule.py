"""--lr-warmup: the learning rate rises linearly to the halving schedule, then follows it."""

import pytest
import torch

from routing_rl.agents.registry import make_learner
from routing_rl.data import Split
from routing_rl.training.config import make_config
from routing_rl.training.sgd import lr_schedule


def test_the_ramp_reaches_the_halving_schedule_and_then_is_it():
    assert [lr_schedule(0.1, t, 500, 4) for t in range(4)] == pytest.approx(
        [0.1 * 0.5 ** (t / 500) * (t + 1) / 4 for t in range(4)])
    for t in (4, 10, 1000):
        assert lr_schedule(0.1, t, 500, 4) == lr_schedule(0.1, t, 500) == pytest.approx(0.1 * 0.5 ** (t / 500))


def test_a_learner_steps_at_the_warmed_up_rate():
    """The rate a learner logs (and steps with) is the ramp's; without --lr-warmup it starts at
    the full rate."""
    generator = torch.Generator().manual_seed(0)
    batch = Split(torch.rand(8, 3, 32, 32, generator=generator), torch.randint(0, 3, (8,), generator=generator),
                  torch.zeros(8, dtype=torch.long))
    for warmup, first_rates in ((3, [0.1 / 3, 0.2 / 3, 0.1]), (0, [0.1, 0.1, 0.1])):
        config = make_config("smoke", agent="static", arch="static-1", lr=0.1, lr_half_life=1_000_000, lr_warmup=warmup)
        learner = make_learner(config, 3, torch.device("cpu"))
        logged = [learner.train_step(batch, t)["charts/lr"] for t in range(3)]
        assert logged == pytest.approx(first_rates, rel=1e-5)
        assert [group["lr"] for group in learner.sgd.optimizer.param_groups] == pytest.approx([logged[-1]] * len(
            learner.sgd.optimizer.param_groups), rel=1e-5)


def test_a_negative_warmup_is_refused():
    with pytest.raises(ValueError, match="lr_warmup must be an integer >= 0, got -1"):
        make_config("smoke", agent="static", arch="static-1", lr_warmup=-1)
