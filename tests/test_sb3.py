"""SB3 baselines: short training runs on tiny synthetic data, saving, loading, evaluation."""

import csv
import json
import zipfile

import numpy as np
import pytest
import torch
from routing_rl.agents.sb3 import (
    ALGORITHMS,
    SB3LoadError,
    latest_checkpoint,
    load_sb3,
    sb3_decide,
    train_sb3,
)
from routing_rl.envs import JointTraining, RoutingSB3VecEnv
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from routing_rl.training.config import make_config
from routing_rl.data import SOURCES, RoutingDataset, Split
from routing_rl.training.evaluate import evaluate

SMALL_POLICY = {"net_arch": [16]}
"""A policy of one 16-unit layer: the default's two 128-unit layers over the 2,055 observations make
every zip saved (model, best model, each checkpoint) several MB bigger."""
SHORT = {  # SB3 settings that let a few hundred training images exercise every update
    "dqn": {"learning_starts": 32, "buffer_size": 512, "batch_size": 16, "target_update_interval": 64,
            "policy_kwargs": SMALL_POLICY},
    "ppo": {"n_steps": 8, "policy_kwargs": SMALL_POLICY},
    "a2c": {"n_steps": 4, "policy_kwargs": SMALL_POLICY},
}


def test_the_suite_keeps_the_folders_of_failed_tests_only(request):
    """Issue 48: pytest kept every test's run folder for three sessions (about 1.1 GB each);
    a passing test's folder now goes when it ends, and a run that passed leaves none."""
    assert request.config.getini("tmp_path_retention_policy") == "failed"
    assert int(request.config.getini("tmp_path_retention_count")) <= 2


def tiny_dataset(n=48, classes=3, seed=0):
    generator = torch.Generator().manual_seed(seed)
    split = Split(torch.rand(n, 3, 32, 32, generator=generator), torch.randint(classes, (n,), generator=generator),
                  torch.randint(2, (n,), generator=generator))
    return RoutingDataset("tiny", tuple("abc"[:classes]), split, split, {}, SOURCES)


def short_config(agent, **overrides):
    values = dict(agent=agent, iterations=16, batch_size=16, eval_every=8, checkpoint_every=8,
                  eval_examples=8, n_envs=8, sb3_kwargs=SHORT[agent])
    return make_config("smoke", **{**values, **overrides})


class CountSteps(BaseCallback):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def _on_step(self) -> bool:
        self.calls += 1
        return True


@pytest.mark.parametrize("agent", ["dqn", "ppo", "a2c"])
def test_short_training_runs_logs_checkpoints_and_evaluates(tmp_path, agent):
    dataset = tiny_dataset()
    counter = CountSteps()
    result = train_sb3(short_config(agent), dataset, tmp_path, torch.device("cpu"), callbacks=[counter])
    assert isinstance(result.model, ALGORITHMS[agent])
    trainer = result.model.feature_trainer
    assert trainer.updates == 16, "the budget is 16 iterations of 16 images, as for every learner"
    assert result.model.num_timesteps >= 16 * 16 and counter.calls >= 16 * 16 // 8, "an image takes 1+ steps"
    assert result.net is result.model.routed_net

    assert [entry["iteration"] for entry in result.history] == [8, 16]
    assert json.loads((tmp_path / "sb3_history.json").read_text()) == result.history
    (test,) = result.evaluations(dataset.test)
    assert 0.0 <= test["accuracy"] <= 1.0 and test["k_cpt"] == 4e-9
    assert min(result.net.leaf_macs) <= test["mean_macs"] <= max(result.net.leaf_macs)
    assert sum(leaf["fraction"] for leaf in test["leaves"].values()) == pytest.approx(1.0)

    assert (tmp_path / "model.zip").is_file() and (tmp_path / "best_model.zip").is_file()
    assert latest_checkpoint(tmp_path).name == f"{agent}_16_iterations.zip"
    assert list(tmp_path.glob("events.out.tfevents.*"))
    with open(tmp_path / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    columns = list(rows[0])
    steps = [int(row["time/total_timesteps"]) for row in rows if row.get("time/total_timesteps")]
    assert steps and max(steps) >= 16 * 16
    for tag in ("charts/train_accuracy", "charts/train_mean_macs", "losses/c_err", "charts/lr",
                "charts/val_accuracy", "charts/val_mean_macs", "rollout/ep_rew_mean", "eval/mean_reward"):
        assert tag in columns, tag
    if agent == "dqn":
        assert "charts/epsilon" in columns
    events = EventAccumulator(str(tmp_path)).Reload()
    assert [e.step for e in events.Scalars("charts/val_accuracy")] == [8, 16], "TensorBoard steps are iterations"
    assert max(e.step for e in events.Scalars("losses/c_err")) <= 16

    model, net = load_sb3(tmp_path / "model.zip")
    assert type(model) is ALGORITHMS[agent]
    for key, value in result.net.state_dict().items():
        assert torch.equal(net.state_dict()[key], value), key
    assert model.feature_trainer.updates == result.model.feature_trainer.updates
    again = evaluate(net, dataset.test, 4e-9, sb3_decide(model, net, 4e-9))
    assert again["accuracy"] == test["accuracy"] and again["mean_macs"] == test["mean_macs"]


def test_dqn_maps_eps_greedy_and_gamma_one(tmp_path):
    config = short_config("dqn", policy="eps-greedy", epsilon=0.05, iterations=4)
    model = train_sb3(config, tiny_dataset(), tmp_path, torch.device("cpu")).model
    assert isinstance(model, DQN)
    assert model.exploration_final_eps == 0.05 and model.exploration_initial_eps == 1.0
    assert model.exploration_fraction == 0.5, "ε anneals over the first half of the image budget"
    assert model.gamma == 1.0
    assert model.double_q, "double Q-learning's targets by default"
    assert model.exploration_rate == pytest.approx(0.05), "exploration anneals on the image budget, which is spent"
    assert model.feature_trainer.options.execution == "full", "every head learns, whatever ε explores"


@pytest.mark.parametrize("side_heads", [True, False])
def test_dqn_replays_the_exits_its_paths_passed(tmp_path, side_heads):
    """With side heads (the default) the replay buffer holds, beside DQN's own transitions,
    one terminal exit transition for each time an example went on past a junction."""
    config = short_config("dqn", iterations=8, side_heads=side_heads,
                          sb3_kwargs={**SHORT["dqn"], "buffer_size": 100_000})
    model = train_sb3(config, tiny_dataset(), tmp_path, torch.device("cpu")).model
    buffer = model.replay_buffer
    assert not buffer.full
    stored = buffer.size() * model.n_envs
    actions = buffer.actions[:buffer.size()].reshape(-1)
    went_on = int((actions == 1).sum())  # on the chain: the next column; side exits are all action 0
    waiting = len(model._side_exits) if model._side_exits is not None else 0
    assert waiting < model.n_envs
    own = model.num_timesteps - model.n_envs  # SB3 stops (the budget spent) before storing the last step
    side = stored - own
    assert side == (went_on - waiting if side_heads else 0)
    if side_heads:
        assert went_on > 0 and buffer.dones[:buffer.size()].sum() >= side


def test_double_q_values_the_online_nets_choice_with_the_target_net(tmp_path):
    """With ``double_q`` the target is r + Q_target(s', argmax_a Q(s', a)); without it SB3's
    r + max_a Q_target(s', a). The two nets are made to disagree, lr set to 0, one batch fixed."""
    config = short_config("dqn", iterations=4, double_q=True)
    model = train_sb3(config, tiny_dataset(), tmp_path, torch.device("cpu")).model
    assert model.double_q and load_sb3(tmp_path / "model.zip")[0].double_q, "saved with the run's settings"
    batch = model.replay_buffer.sample(64)
    model.replay_buffer.sample = lambda *args, **kwargs: batch
    model.lr_schedule = lambda _: 0.0
    with torch.no_grad():
        for parameter in model.q_net_target.parameters():
            parameter.add_(torch.randn_like(parameter))
        online, target = model.q_net(batch.next_observations), model.q_net_target(batch.next_observations)
        values = model.q_net(batch.observations).gather(1, batch.actions.long())

    def loss(next_values):
        targets = batch.rewards + (1 - batch.dones) * next_values.reshape(-1, 1)
        return torch.nn.functional.smooth_l1_loss(values, targets).item()

    double = loss(target.gather(1, online.argmax(dim=1, keepdim=True)))
    single = loss(target.max(dim=1).values)
    assert double != pytest.approx(single), "the nets must disagree somewhere for the test to tell them apart"
    model.train(1, 64)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(double)
    model.double_q = False
    model.train(1, 64)
    assert model.logger.name_to_value["train/loss"] == pytest.approx(single)


def test_resume_continues_from_the_newest_checkpoint(tmp_path):
    dataset = tiny_dataset()
    first = train_sb3(short_config("a2c", iterations=8), dataset, tmp_path, torch.device("cpu"))
    assert first.model.feature_trainer.updates == 8
    resumed = train_sb3(short_config("a2c", iterations=16), dataset, tmp_path, torch.device("cpu"), resume=True)
    assert resumed.model.feature_trainer.updates == 16, "the feature optimiser's step count carried over"
    assert [entry["iteration"] for entry in resumed.history] == [8, 16]


def test_dynamic_k_cpt_agent_is_judged_at_every_cost(tmp_path):
    result = train_sb3(short_config("ppo", k_cpt="dynamic", iterations=4), tiny_dataset(), tmp_path,
                       torch.device("cpu"))
    assert result.model.observation_space.shape[0] == 2048 + 7 + 1
    evaluations = result.evaluations(tiny_dataset().test)
    assert [e["k_cpt"] for e in evaluations] == result.k_cpts and len(evaluations) == 8
    load_sb3(tmp_path / "model.zip", device="cpu")
    with zipfile.ZipFile(tmp_path / "model.zip") as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    data = json.loads(entries["data"])
    del data["routing"]["k_cpt_unit"]  # as saved when observations gave k_cpt × 1e7
    entries["data"] = json.dumps(data).encode()
    with zipfile.ZipFile(tmp_path / "before.zip", "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    with pytest.raises(SB3LoadError, match="k_cpt × 1e7, not on today's log scale"):
        load_sb3(tmp_path / "before.zip", device="cpu")


def test_load_into_an_env_shares_its_net_and_trainer(tmp_path):
    dataset = tiny_dataset()
    train_sb3(short_config("ppo", iterations=4), dataset, tmp_path, torch.device("cpu"))
    env = RoutingSB3VecEnv(8, dataset=dataset, train=True)
    model, net = load_sb3(tmp_path / "model.zip", env=env, device="cpu")
    assert net is env.net and model.feature_trainer is env.trainer
    model.learn(32)
    obs = env.reset()
    actions, _ = model.predict(obs, deterministic=True)
    assert actions.shape == (8,) and np.all(actions < 2)


def test_plain_sb3_algorithms_take_the_vec_env_directly():
    dataset = tiny_dataset()
    env = VecMonitor(RoutingSB3VecEnv(4, dataset=dataset, train=True, joint=JointTraining(batch_size=8), seed=0))
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, n_epochs=1, seed=0).learn(64)
    assert model.num_timesteps == 64 and env.unwrapped.trainer.updates > 0
    net = env.unwrapped.net
    result = evaluate(net, dataset.test, 4e-9, sb3_decide(model, net, 4e-9))
    assert 0.0 <= result["accuracy"] <= 1.0


def test_train_sb3_rejects_other_agents(tmp_path):
    with pytest.raises(ValueError, match="train_sb3 trains dqn, ppo, a2c"):
        train_sb3(make_config("smoke", agent="critic"), tiny_dataset(), tmp_path, torch.device("cpu"))


def test_observations_carry_the_exits_confidence_and_the_model_reloads(tmp_path):
    dataset = tiny_dataset()
    result = train_sb3(short_config("dqn", iterations=8, exit_confidence=True), dataset, tmp_path, torch.device("cpu"))
    assert result.net.exit_confidence
    assert result.model.observation_space.shape[0] == 2048 + 1 + 7, "column 7's descriptor, its exit's confidence, 7 junctions"
    (test,) = result.evaluations(dataset.test)
    model, net = load_sb3(tmp_path / "model.zip")
    assert net.exit_confidence and model.observation_space == result.model.observation_space
    again = evaluate(net, dataset.test, 4e-9, sb3_decide(model, net, 4e-9))
    assert again["accuracy"] == test["accuracy"] and again["mean_macs"] == test["mean_macs"]
    resumed = train_sb3(short_config("dqn", iterations=12, exit_confidence=True), dataset, tmp_path,
                        torch.device("cpu"), resume=True)
    assert resumed.model.feature_trainer.updates == 12


@pytest.mark.parametrize("agent", ["ppo", "actor", "critic"])
def test_double_q_belongs_to_dqn(agent):
    with pytest.raises(ValueError, match="--double-q changes DQN's targets"):
        make_config("smoke", agent=agent, double_q=True)
