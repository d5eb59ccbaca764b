import io

import pytest
import torch

from routing_rl.agents.base import Learner
from routing_rl.training.config import make_config
from routing_rl.data import Split
from routing_rl.nets.multiscale import static
from routing_rl.app.trainer import BatchSampler, fit
from routing_rl.training import acceleration
from routing_rl.training.interrupt import Interrupted, request_stop


class PlainLearner(Learner):
    """Cross-entropy on a static net: the least a learner can be."""

    def __init__(self, config, signal_at=None):
        torch.manual_seed(0)
        super().__init__(static(1, classes=3), config, torch.device("cpu"))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        self.signal_at = signal_at
        self.seen = []

    def train_step(self, batch, iteration):
        if iteration == self.signal_at:  # Ctrl-C arrives in the middle of this step
            request_stop()
        self.seen.append(batch.labels.clone())
        loss = torch.nn.functional.cross_entropy(self.net(batch.images).logits["exit1"], batch.labels)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"losses/total": loss.item()}

    def state_dict(self):
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])


def tiny_split(n=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return Split(torch.rand(n, 3, 32, 32, generator=generator), torch.arange(n) % 3, torch.arange(n) % 2)


def copy(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)  # what load_checkpoint accepts


def config(**overrides):
    return make_config("smoke", agent="static", arch="static-1", **{"iterations": 6, "batch_size": 5, "eval_every": 3, "checkpoint_every": 3, **overrides})


def test_batches_cover_each_epoch_once():
    sampler = BatchSampler(10, 4, seed=0)
    drawn = torch.cat([sampler.next() for _ in range(5)])
    assert sorted(drawn[:10].tolist()) == list(range(10))
    assert sorted(drawn[10:20].tolist()) == list(range(10))


def test_fit_validates_and_checkpoints_on_schedule():
    saved = []
    learner = PlainLearner(config())
    state = fit(learner, tiny_split(), tiny_split(9, 1), config(), save=lambda ckpt: saved.append(copy(ckpt)))
    assert state.iteration == 6
    assert [entry["iteration"] for entry in state.history] == [3, 6]
    assert state.history[-1]["evaluations"][0]["examples"] == 9
    assert [ckpt["training_state"]["iteration"] for ckpt in saved] == [3, 6]


def test_resume_continues_exactly_where_the_checkpoint_left_off():
    saved = []
    straight = PlainLearner(config())
    fit(straight, tiny_split(), tiny_split(9, 1), config(), save=lambda ckpt: saved.append(copy(ckpt)))
    resumed = PlainLearner(config())
    fit(resumed, tiny_split(), tiny_split(9, 1), config(), resume=saved[0])
    assert torch.equal(torch.cat(straight.seen[3:]), torch.cat(resumed.seen))
    for a, b in zip(straight.net.state_dict().values(), resumed.net.state_dict().values()):
        torch.testing.assert_close(a, b)


def test_ctrl_c_finishes_the_step_saves_it_and_resumes_bit_for_bit():
    saved = []
    straight = PlainLearner(config())
    fit(straight, tiny_split(), tiny_split(9, 1), config())
    learner = PlainLearner(config(), signal_at=4)
    with pytest.raises(Interrupted) as stop:
        fit(learner, tiny_split(), tiny_split(9, 1), config(), save=lambda ckpt: saved.append(copy(ckpt)))
    assert stop.value.iteration == 5 and stop.value.exit_code == 130
    assert saved[-1]["training_state"]["iteration"] == 5, "the step in progress finished and was saved"
    resumed = PlainLearner(config())
    fit(resumed, tiny_split(), tiny_split(9, 1), config(), resume=saved[-1])
    assert torch.equal(torch.cat(straight.seen[5:]), torch.cat(resumed.seen))
    for a, b in zip(straight.state_dict()["optimizer"]["state"].values(), resumed.state_dict()["optimizer"]["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    for a, b in zip(straight.net.state_dict().values(), resumed.net.state_dict().values()):
        assert torch.equal(a, b)




class DtypeRecorder(PlainLearner):
    """A learner that notes the dtype its net's logits come out in, step by step, and the
    dtype of every convolution's output outside its steps (the evaluations)."""

    def __init__(self, config):
        super().__init__(config)
        self.stepping, self.stepped, self.evaluated = False, [], set()

        def note(module, inputs, output):
            if not self.stepping:
                self.evaluated.add(output.dtype)

        for module in self.net.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.register_forward_hook(note)

    def train_step(self, batch, iteration):
        self.stepping = True
        self.stepped.append(self.net(batch.images).logits["exit1"].dtype)
        stats = super().train_step(batch, iteration)
        self.stepping = False
        return stats


def test_bf16_precision_runs_the_steps_under_autocast_and_evaluates_in_float32(monkeypatch):
    monkeypatch.setattr(acceleration, "native_bf16", lambda device: True)  # emulated where it is not: slower, same dtypes
    learner = DtypeRecorder(config(precision="bf16"))
    state = fit(learner, tiny_split(), tiny_split(9, 1), config(precision="bf16"))
    assert learner.stepped == [torch.bfloat16] * 6
    assert all(p.dtype == torch.float32 for p in learner.net.parameters()), "the weights stay float32"
    assert learner.evaluated == {torch.float32}
    float32 = DtypeRecorder(config())
    fit(float32, tiny_split(), tiny_split(9, 1), config())
    assert float32.stepped == [torch.float32] * 6
    ours, theirs = learner.net.state_dict(), float32.net.state_dict()
    moved = max(float((ours[k] - theirs[k]).abs().max()) for k in ours if ours[k].is_floating_point())
    assert moved > 0, "bf16 steps give other weights than float32 ones"
    assert state.history[-1]["evaluations"][0]["examples"] == 9


def test_precision_is_checked_with_the_config():
    with pytest.raises(ValueError, match="unknown precision 'fp8'; choose one of float32, bf16"):
        config(precision="fp8")
    with pytest.raises(ValueError, match="drop --precision"):
        make_config("smoke", agent="ppo", precision="bf16")


def test_cuda_graphs_mark_where_every_training_step_begins(monkeypatch):
    """With --cuda-graphs the trainer tells CUDA graph trees that a step begins before each
    training step, and only then (a validation pass is no step)."""
    events = []

    class Recorder(PlainLearner):
        def train_step(self, batch, iteration):
            events.append("step")
            return super().train_step(batch, iteration)

    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: events.append("begin"))
    fit(Recorder(config(cuda_graphs=True)), tiny_split(), tiny_split(9, 1), config(cuda_graphs=True))
    assert events == ["begin", "step"] * 6
    events.clear()
    fit(Recorder(config()), tiny_split(), tiny_split(9, 1), config())
    assert events == ["step"] * 6
