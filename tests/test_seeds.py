"""Every generator is seeded from all the bits of a seed (routing_rl.core.seeds): torch's CPU
generator keeps only 32 of them, so seed s and s + 2**32 gave bit-identical runs; seeds
below 2**32 still give exactly the runs they always gave."""

from __future__ import annotations

import pytest
import torch

from routing_rl.app.trainer import BatchSampler
from routing_rl.core.seeds import manual_seed, seed_generator, seeded_generator
from routing_rl.data.containers import stratified_indices
from routing_rl.nets.multiscale import build
from routing_rl.nets.seeding import seeded_net

ALIASES = (0, 2**32, 2**33, 2**32 + 1, 1, 2**63 - 1, 2**63, 2**64 - 1)
"""Seeds that torch's CPU generator would have taken for 0 or 1."""


def draws(generator: torch.Generator) -> torch.Tensor:
    return torch.cat([torch.rand(8, generator=generator), torch.randn(3, generator=generator)])


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**31, 2**32 - 1])
def test_seeds_below_2_32_seed_exactly_as_torch_does(seed):
    ours, torchs = seeded_generator(seed), torch.Generator().manual_seed(seed)
    assert torch.equal(ours.get_state(), torchs.get_state())
    assert torch.equal(draws(ours), draws(torchs))


def test_seeds_that_differ_only_above_32_bits_give_different_draws():
    streams = [draws(seeded_generator(seed)) for seed in ALIASES]
    assert all(not torch.equal(a, b) for i, a in enumerate(streams) for b in streams[i + 1:])
    assert [seeded_generator(seed).initial_seed() for seed in ALIASES] == list(ALIASES)
    assert torch.equal(draws(seeded_generator(2**40 + 3)), draws(seeded_generator(2**40 + 3)))


def test_a_large_seeds_generator_resumes_from_its_saved_state():
    generator = seeded_generator(2**32 + 5)
    torch.rand(5, generator=generator)
    saved = generator.get_state()
    expected = draws(generator)
    assert torch.equal(draws(torch.Generator().set_state(saved)), expected)


@pytest.mark.parametrize("seed", [-1, 2**64, True, 1.5, "0"])
def test_a_seed_outside_64_bits_is_refused(seed):
    with pytest.raises(ValueError, match=r"a seed must be an integer in 0 \.\.\. 2\*\*64 - 1"):
        seed_generator(torch.Generator(), seed)


def test_the_global_generator_keeps_every_bit():
    manual_seed(2**32)
    high = torch.rand(4)
    manual_seed(0)
    low = torch.rand(4)
    torch.manual_seed(0)
    assert torch.equal(low, torch.rand(4)) and not torch.equal(high, low)
    assert torch.initial_seed() == 0


def test_nets_and_data_orders_of_seeds_0_and_2_32_differ():
    nets = [seeded_net(lambda: build("chain", 1, 10), seed) for seed in (0, 2**32)]
    weights = [torch.cat([p.flatten() for p in net.parameters()]) for net in nets]
    assert not torch.equal(*weights)
    labels = torch.arange(200) % 10
    assert not torch.equal(stratified_indices(labels, 0.3, 0)[1], stratified_indices(labels, 0.3, 2**32)[1])
    orders = [BatchSampler(100, 100, seed).next() for seed in (0, 2**32)]
    assert not torch.equal(*orders)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        assert torch.equal(weights[0], torch.cat([p.flatten() for p in build("chain", 1, 10).parameters()]))


def test_runs_of_seeds_0_and_2_32_differ(tiny_data, tmp_path, monkeypatch):
    from routing_rl.app.runs import load_run, train
    from routing_rl.training.config import make_config

    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path / "cache"))
    nets = []
    for seed in (0, 2**32):
        config = make_config("smoke", agent="actor", iterations=2, eval_every=2, checkpoint_every=2, seed=seed,
                             data_dir=str(tiny_data), download=False, validation_fraction=0.4, device="cpu",
                             logdir=str(tmp_path), run_name=f"seed-{seed}")
        train(config)
        nets.append(load_run(tmp_path / f"seed-{seed}")[2])
    states = [net.state_dict() for net in nets]
    assert any(not torch.equal(states[0][name], states[1][name]) for name in states[0])
