"""Issue 48, the SB3 agents: a resumed run trains its whole budget and equals the run no signal
stopped, a signal stops PPO and A2C within a rollout, a resumed run never writes through a
hard link to a backup of its folder, and --overwrite refuses an SB3 policy that cannot fit
before it deletes anything (tiny synthetic data)."""

from __future__ import annotations

import csv
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from test_safety_folders import finished_dqn, finished_dqn_logdir  # noqa: F401  (fixtures)
from test_safety_resume import tensors
from test_safety_runs import args, refused, snapshot
from test_sb3 import short_config, tiny_dataset

from routing_rl.agents.sb3 import RoutingDQN, checkpoints, train_sb3
from routing_rl.training.interrupt import Interrupted, request_stop

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ROUTING_RL_CACHE", str(tmp_path_factory.getbasetemp() / "safety-sb3-cache"))


class SignalAt(BaseCallback):
    """Ctrl-C during environment step ``at`` (between SB3 storing it and the next)."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def _on_step(self) -> bool:
        if self.n_calls == self.at:
            request_stop()
        return True


def stopped_and_resumed(config, run_dir, at: int):
    """The run of ``config`` stopped by Ctrl-C at environment step ``at``, then resumed."""
    with pytest.raises(Interrupted):
        train_sb3(config, tiny_dataset(), run_dir, CPU, callbacks=[SignalAt(at)])
    return train_sb3(config, tiny_dataset(), run_dir, CPU, resume=True)


def sb3_tensors(result) -> dict[str, torch.Tensor]:
    """The agent's whole learner state: policy (with DQN's target net), its optimiser, the
    feature network and its optimiser."""
    model = result.model
    return tensors({"policy": model.policy.state_dict(), "optimizer": model.policy.optimizer.state_dict(),
                    "net": result.net.state_dict(), "trainer": model.feature_trainer.state_dict()})


def assert_same_run(straight, resumed, where: str) -> None:
    a, b = sb3_tensors(straight), sb3_tensors(resumed)
    differ = [name for name in a if not torch.equal(a[name], b[name])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ after a stop {where}: {differ[:5]}"
    assert resumed.history == straight.history
    test = tiny_dataset(seed=1).test
    assert resumed.evaluations(test) == straight.evaluations(test)


def mostly_deep(self, observation, state=None, episode_start=None, deterministic=False):
    """A fixed routing, as a trained DQN's late in a run: an image whose descriptor falls in
    one of four bins exits at the first junction, every other one goes to the deepest exit
    (episodes of 1 and 7 steps, out of step with each other across the envs)."""
    first = observation[:, -7] == 1  # the junction one-hot after the descriptor: the chain's first junction
    early = (np.abs(observation[:, :-7]).sum(axis=1) * 1e4).astype(np.int64) % 4 == 0
    return np.where(first & early, 0, 1), None


# --- a resumed run trains its whole budget, bit for bit (item 14) -----------------------------


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_an_sb3_agent_stopped_by_a_signal_resumes_bit_for_bit(agent, tmp_path):
    config = short_config(agent, iterations=12, checkpoint_every=4)
    straight = train_sb3(config, tiny_dataset(), tmp_path / "straight", CPU)
    step = random.randrange(5, 40)  # past a periodic checkpoint or not, past learning_starts or not
    with pytest.raises(Interrupted) as stop:
        train_sb3(config, tiny_dataset(), tmp_path / "stopped", CPU, callbacks=[SignalAt(step)])
    newest = checkpoints(tmp_path / "stopped")[0]
    assert newest.name == f"{agent}_{stop.value.iteration}_iterations.zip"
    assert newest.with_name(newest.stem + ".state.pt").is_file()
    resumed = train_sb3(config, tiny_dataset(), tmp_path / "stopped", CPU, resume=True)
    assert_same_run(straight, resumed, f"at environment step {step}")


@pytest.mark.slow
@pytest.mark.parametrize("at", [8, 10])
def test_dqn_resumed_with_long_episodes_in_flight_trains_every_iteration(at, tmp_path, monkeypatch):
    """More envs in flight (64) than images left (16 per iteration) and paths mostly 7 steps
    long: the few images left take every env's steps, episodes in flight included. The
    resumed run trains all 8 iterations, bit for bit the run no signal stopped."""
    monkeypatch.setattr(RoutingDQN, "predict", mostly_deep)
    config = short_config("dqn", iterations=8, n_envs=64, checkpoint_every=100, eval_every=4,
                          sb3_kwargs={"learning_starts": 0, "buffer_size": 512, "batch_size": 16,
                                      "target_update_interval": 64, "policy_kwargs": {"net_arch": [16]}})
    straight = train_sb3(config, tiny_dataset(), tmp_path / "straight", CPU)
    assert straight.model.feature_trainer.updates == 8
    resumed = stopped_and_resumed(config, tmp_path / "stopped", at)
    assert resumed.model.feature_trainer.updates == 8, "the resumed run spent its whole budget"
    assert_same_run(straight, resumed, f"at environment step {at}")


# --- item 22: a signal stops PPO and A2C within a rollout -------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["ppo", "a2c"])
@pytest.mark.parametrize("n_steps, at", [(64, 3), (8, 11)])
def test_a_signal_within_a_rollout_stops_ppo_and_a2c_there_and_they_resume_bit_for_bit(agent, n_steps, at, tmp_path):
    """Ctrl-C at environment step ``at`` stops the run before the next step, not at the next
    rollout: with rollouts of 64 vector steps, longer than the whole budget, that rollout would
    never come; with rollouts of 8, the resumed run completes the rollout it was in and trains
    on it as the run no signal stopped did."""
    config = short_config(agent, iterations=8, checkpoint_every=4, eval_every=4,
                          sb3_kwargs={"n_steps": n_steps, "policy_kwargs": {"net_arch": [16]}})
    straight = train_sb3(config, tiny_dataset(), tmp_path / "straight", CPU)
    rollouts = straight.model.num_timesteps // (n_steps * config.options.n_envs)
    assert rollouts == (0 if n_steps == 64 else 3), "the budget ends within the first rollout, or in the fourth"
    ctrl_c = SignalAt(at)
    with pytest.raises(Interrupted) as stop:
        train_sb3(config, tiny_dataset(), tmp_path / "stopped", CPU, callbacks=[ctrl_c])
    assert ctrl_c.model.num_timesteps == at * config.options.n_envs, "stopped before the next environment step"
    assert checkpoints(tmp_path / "stopped")[0].name == f"{agent}_{stop.value.iteration}_iterations.zip"
    resumed = train_sb3(config, tiny_dataset(), tmp_path / "stopped", CPU, resume=True)
    assert_same_run(straight, resumed, f"at environment step {at}, within a rollout of {n_steps}")


@pytest.mark.slow
def test_sigterm_within_a_ppo_rollout_exits_143_in_one_line_and_resumes(tiny_data, tmp_path, capsys, monkeypatch):
    """The command line: SIGTERM at environment step 3 of PPO's first rollout (which the whole
    budget fits in) ends the run with 143 and one line; --resume finishes it."""
    from test_safety_resume import args, one_line

    from routing_rl.agents import sb3_callbacks
    from routing_rl.app.cli import main

    steps = sb3_callbacks.ProgressCallback._on_step

    def signalled(self):
        if self.n_calls == 3:
            request_stop(signal.SIGTERM)
        return steps(self)

    monkeypatch.setattr(sb3_callbacks.ProgressCallback, "_on_step", signalled)
    command = args(tiny_data, tmp_path, "run", "ppo", "--n-envs", "8", "--sb3-kwargs", '{"n_steps": 256}')
    assert main(command) == 143
    err = one_line(capsys.readouterr().err)
    assert err.startswith("train_agent.py: interrupted (SIGTERM) after iteration ") and "--resume" in err, err
    assert not (tmp_path / "run" / "metrics.json").exists()
    monkeypatch.setattr(sb3_callbacks.ProgressCallback, "_on_step", steps)
    assert main(["--resume", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "metrics.json").is_file()


# --- item 12: a resumed run never writes through a hard link ----------------------------------


def hard_link_copy(folder: Path, copy: Path) -> dict[str, bytes]:
    """``cp -al folder copy``: every file of ``copy`` a hard link to ``folder``'s; returns their contents."""
    for path in folder.rglob("*"):
        if path.is_file():
            (copy / path.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
            os.link(path, copy / path.relative_to(folder))
    return {str(p.relative_to(copy)): p.read_bytes() for p in copy.rglob("*") if p.is_file()}


def column(run_dir: Path, name: str) -> list[str]:
    with open(run_dir / "progress.csv") as f:
        return [row[name] for row in csv.DictReader(f) if row[name]]


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["dqn", "ppo"])
def test_a_resumed_run_leaves_a_hard_linked_copy_of_its_folder_as_it_was(agent, tmp_path):
    """Ctrl-C, ``cp -al RUN SNAP``, ``--resume RUN``: SNAP's files keep their contents, and
    RUN's progress.csv and evaluations.npz hold the whole run, as the run no signal stopped
    wrote them (the rows and evaluations before the stop kept, none twice)."""
    config = short_config(agent, iterations=12, checkpoint_every=8, eval_every=4)
    straight = train_sb3(config, tiny_dataset(), tmp_path / "straight", CPU)
    with pytest.raises(Interrupted):
        train_sb3(config, tiny_dataset(), tmp_path / "run", CPU, callbacks=[SignalAt(30)])
    snapshot = hard_link_copy(tmp_path / "run", tmp_path / "snap")
    assert {"progress.csv", "evaluations.npz", "sb3_history.json"} <= set(snapshot)
    resumed = train_sb3(config, tiny_dataset(), tmp_path / "run", CPU, resume=True)
    changed = [name for name, data in snapshot.items() if (tmp_path / "snap" / name).read_bytes() != data]
    assert not changed, f"written through a hard link: {changed}"
    assert resumed.history == straight.history
    for run in ("straight", "run"):
        assert column(tmp_path / run, "iteration") == sorted(column(tmp_path / run, "iteration"), key=int)
    assert column(tmp_path / "run", "iteration") == column(tmp_path / "straight", "iteration")
    assert column(tmp_path / "run", "eval/mean_reward") == column(tmp_path / "straight", "eval/mean_reward")
    with np.load(tmp_path / "straight" / "evaluations.npz") as a, np.load(tmp_path / "run" / "evaluations.npz") as b:
        assert a["timesteps"].tolist() == b["timesteps"].tolist() and len(a["timesteps"]) == 3
        assert np.array_equal(a["results"], b["results"]) and np.array_equal(a["ep_lengths"], b["ep_lengths"])


# --- item 10: --overwrite sizes the SB3 policy before it deletes anything -----------------------

BIG_POLICY = ["--sb3-kwargs", '{"policy_kwargs": {"net_arch": [400000]}}']


def test_overwrite_keeps_a_finished_dqn_run_whose_new_policy_cannot_fit(finished_dqn, tiny_data, capsys,  # noqa: F811
                                                                        monkeypatch):
    """A 400,000-unit layer over DQN's 2,055 observations: 1.65e9 parameters with the target
    network, 18 GiB and more to train, refused on a machine with 8 GiB free before the
    finished run is touched, naming the setting to lower."""
    from routing_rl.training import footprint

    monkeypatch.setattr(footprint, "available_bytes", lambda device: 8 * 2**30)
    before = snapshot(finished_dqn)
    err = refused(args(tiny_data, finished_dqn.parent, "run", "--overwrite", "--n-envs", "8", *BIG_POLICY,
                       agent="dqn"), capsys)
    assert "out of memory: dqn's policy (1.65e+09 parameters, net_arch [400000]) and replay buffer" in err, err
    assert "but cpu has 8 GiB free; lower net_arch in --sb3-kwargs' policy_kwargs (now [400000]) or batch_size" in err
    assert snapshot(finished_dqn) == before


@pytest.mark.parametrize("agent, net_arch, parameters", [("dqn", [10**6, 10**6], "2e+12"),  # with its target network
                                                        ("ppo", {"pi": [10**6, 10**6], "vf": [8]}, "1e+12")])
def test_a_policy_larger_than_any_machine_is_sized_not_allocated(agent, net_arch, parameters, tiny_data, tmp_path,
                                                                 capsys):
    """10^12 parameters and more: checking SB3's keyword arguments on its stand-in env
    allocates none of them (it would ask for terabytes), and the memory check names the policy."""
    kwargs = ["--sb3-kwargs", json.dumps({"policy_kwargs": {"net_arch": net_arch}})]
    err = refused(args(tiny_data, tmp_path, "run", "--n-envs", "8", *kwargs, agent=agent), capsys)
    assert f"out of memory: {agent}'s policy ({parameters} parameters, net_arch {json.dumps(net_arch)})" in err, err
    assert not (tmp_path / "run").exists()


def test_running_out_of_memory_while_an_sb3_agent_trains_names_its_settings(tiny_data, tmp_path, capsys, monkeypatch):
    def allocate(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried "
                           "to allocate 6585600000 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr("routing_rl.agents.sb3.RoutingSB3VecEnv", allocate)  # train_sb3 makes its env first
    err = refused(args(tiny_data, tmp_path, "run", "--n-envs", "8", agent="dqn"), capsys)
    assert err.endswith("lower --n-envs (now 8), --width (now 1) or the sizes in --sb3-kwargs (buffer_size, batch_size, "
                        "n_steps, policy_kwargs' net_arch; now {}), then start again with --overwrite"), err


def test_the_free_memory_is_capped_by_the_address_space_limit():
    """``ulimit -v``: what the process may still map, not the machine's free memory."""
    code = ("import re, resource, torch; from routing_rl.training.footprint import available_bytes\n"
            "mapped = int(re.search(r'VmSize:\\s+(\\d+) kB', open('/proc/self/status').read())[1]) * 1024\n"
            "cap = mapped + 2**30\n"
            "resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
            "print(available_bytes(torch.device('cpu')) / 2**30)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert 0.9 < float(done.stdout) <= 1.0, "1 GiB more than the process maps, less what it mapped since"
