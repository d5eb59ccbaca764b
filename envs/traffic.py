"""Examples in flight through one routed net: the single implementation of stepping.

:class:`Traffic` holds ``n`` slots, each carrying one episode of a
:class:`~routing_rl.envs.task.RoutingTask`: one input (or, for a task of sequences, one
frame after another) from the root to a leaf. Between steps every slot stands at a
junction, and the slots at the same junction form one group holding their node state as a single batch. A step takes one action per
slot, splits each group by the sink chosen, and runs every node on the batch of slots that
reached it, in tree order, until each slot stands at its next junction or has reached a
leaf. The single-example env is ``n = 1``; the vector envs are ``n = N``.

Execution is always in eval mode and without gradients: an example's observation depends
on the example and the weights, never on which other examples share its group. Training
(:mod:`~routing_rl.envs.joint`) happens apart, on finished episodes, and leaves the
batch-norm statistics of the weights it just stepped, so the rewards charged here are the
costs of the network being trained.

Costs: a slot is charged ``k_cpt × cost`` for every node it runs through (transform and
router, the cost in MACs as :attr:`RoutedNet.leaf_macs` counts them, or measured
MAC-equivalents, :class:`~routing_rl.core.k_cpt.CostModel`; the agent stands in for the router
but the paper's cost includes it), in the reward of the step that computed it. The nodes from
the root to the first junction run at reset, which has no reward, so they are charged in
the episode's first step. At the leaf the reward also carries ``-c_err``. An episode's
rewards therefore sum to ``-(k_cpt × path cost + c_err)``, the paper's ``-c_inf``.

Side exits (``side_exits = True``, joint training only, tasks of single inputs): a junction
whose sinks include a leaf has computed that exit head's input for every example there, so
when an example goes elsewhere the step also runs the head (a linear layer) on it and keeps
the transition it did not take — its observation, the exit's action, the reward that
action would have earned (``-(k_cpt × cost(exit) + c_err)``, plus any cost not yet charged),
terminal — in
:attr:`Traffic.side_exits`. An off-policy agent (DQN) learns from them what every exit on its
paths costs, as the sampled critics' side heads do; nothing is charged for them.

Episodes of ``T`` frames: when a frame reaches a leaf before the last one, the task's memory
is carried (:meth:`RoutingTask.carry`) and :meth:`Traffic.refill` runs the next frame to its
first junction in the same slot; its cost is charged in the next step, like a first
frame's. Such an episode's rewards sum to ``-Σ_frames (k_cpt × path cost + c_err)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from gymnasium.error import ResetNeeded
from routing_rl.envs.joint import FeatureTrainer
from routing_rl.envs.observation import ObservationLayout, check_actions

from routing_rl.core.costs import error_cost
from routing_rl.data import Split
from routing_rl.core.graph import RoutedNet, State, take
from routing_rl.core.k_cpt import CostModel, KCpt, c_cpt, router_input

if TYPE_CHECKING:
    from routing_rl.envs.task import RoutingTask


@dataclass
class Group:
    """Slots standing at one junction: their numbers, the node's state and descriptor."""

    slots: np.ndarray  # (b,) int64
    state: State
    descriptor: torch.Tensor  # (b, D)


@dataclass
class SideExits:
    """Transitions not taken, all ``(k, ...)``: observations at the junction, the exit's
    action, the reward it would have earned (float64) and the terminal observations."""

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminal: np.ndarray

    def __len__(self) -> int:
        return len(self.actions)

    def __getitem__(self, rows: slice) -> SideExits:
        return SideExits(self.observations[rows], self.actions[rows], self.rewards[rows], self.terminal[rows])

    @classmethod
    def concatenate(cls, parts: list[SideExits]) -> SideExits:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("observations", "actions", "rewards", "terminal")))


@dataclass
class Finished:
    """Slots that reached a leaf in the last step, with the leaf (index into ``net.leaves``),
    the error cost, whether the prediction was right and whether it ended the episode (its
    last frame); all ``(k,)``."""

    slots: np.ndarray
    leaf: np.ndarray
    c_err: np.ndarray
    correct: np.ndarray
    ended: np.ndarray

    @classmethod
    def none(cls) -> Finished:
        empty = np.zeros(0, dtype=np.int64)
        return cls(empty, empty, np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool))

    @property
    def done(self) -> np.ndarray:
        """The slots whose episode ended."""
        return self.slots[self.ended]


class Traffic:
    """``n`` episodes of ``split`` in flight through ``net``.

    Args:
        task: the routing task (error cost, augmentation, memory, source names).
        net: the routed net (its device is where everything runs).
        split: where episodes are drawn from, uniformly with replacement.
        n: number of slots.
        layout: observation layout of ``net``.
        k_cpt: cost per MAC, or ``"dynamic"`` to draw one of ``K_CPT_VALUES`` per episode.
        error_cost: ``cross_entropy`` or ``zero_one`` (the reward's c_err).
        max_error_cost: the c_err charged is at most this (in the error cost's units: nats for
            cross-entropy); None: unbounded.
        trainer: trains the net on finished paths while :attr:`training` is on.
        training: joint training (and augmentation, if the trainer's options ask) on or off.
        cost: what each node's computation costs; None: its MACs.

    Attributes:
        record_side_exits: keep the exits not taken (while training) in :attr:`side_exits`,
            which the consumer empties (:meth:`take_side_exits`).
    """

    def __init__(self, task, net: RoutedNet, split: Split, n: int, layout: ObservationLayout, k_cpt,
                 error_cost: str, trainer: FeatureTrainer, training: bool, cost: CostModel | None = None,
                 max_error_cost: float | None = None):
        self.task = task
        self.source_names = np.array(task.sources, dtype=object)
        self.net = net
        self.device = net.leaf_macs.device
        self.split = split.to(self.device)
        self.labels = split.labels.cpu().numpy()
        self.sources = split.source.cpu().numpy()
        self.n = n
        self.layout = layout
        self.k_cpt_setting = k_cpt
        self.k_cpt_model = KCpt(k_cpt)
        self.error_cost = error_cost
        self.max_error_cost = max_error_cost
        self.trainer = trainer
        self.training = training
        self.node_macs = {name: net.macs[name] + net.router_macs[name] for name in net.order}
        self.cost_model = cost or CostModel.macs(net)
        self.node_cost = self.cost_model.node
        self.example = np.zeros(n, dtype=np.int64)
        self.frame = np.zeros(n, dtype=np.int64)  # position in the episode's sequence
        self.memory = None  # (n, ...) the task's carried state, once an episode made one
        self.k_cpt = np.zeros(n)
        self.macs = np.zeros(n, dtype=np.int64)  # MACs so far in each slot's episode
        self.spent = np.zeros(n)  # cost so far in each slot's episode
        self.paid = np.zeros(n)  # of which already charged in rewards
        self.decisions = np.full((n, len(layout.junctions)), -1, dtype=np.int64)
        self.images = torch.zeros(n, *net.input_shape, dtype=split.images.dtype, device=self.device)  # for replays
        self.waiting: dict[str, Group] = {}
        self.started = False  # reset() called: until then step() raises ResetNeeded
        self.generator = torch.Generator(device=self.device)
        self.record_side_exits = False
        self.side_exits: list[SideExits] = []

    def with_slots(self, n: int) -> Traffic:
        """Another traffic of ``n`` slots on the same task, net, split, costs and trainer."""
        return Traffic(self.task, self.net, self.split, n, self.layout, self.k_cpt_setting, self.error_cost,
                       self.trainer, self.training, self.cost_model, self.max_error_cost)

    @property
    def label(self) -> np.ndarray:
        return self.labels_at(np.arange(self.n))

    def labels_at(self, slots: np.ndarray) -> np.ndarray:
        """The labels of the slots' current inputs (frames)."""
        return self._current(self.labels, slots)

    @property
    def source(self) -> np.ndarray:
        """The sources of the slots' current inputs (frames)."""
        return self.sources_at(np.arange(self.n))

    def sources_at(self, slots: np.ndarray) -> np.ndarray:
        return self._current(self.sources, slots)

    def _current(self, table: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """``table``'s entries (``(N,)`` per example, or ``(N, T)`` per frame) for the slots' current inputs."""
        if table.ndim == 1:
            return table[self.example[slots]]
        return table[self.example[slots], self.frame[slots]]

    def reset(self, rng: np.random.Generator) -> None:
        """A new example in every slot."""
        self.waiting = {}
        self.started = True
        self.generator.manual_seed(int(rng.integers(2**63)))
        self.start(np.arange(self.n), rng)

    def start(self, slots: np.ndarray, rng: np.random.Generator) -> None:
        """New episodes in ``slots`` (which must not be waiting), run to their first junction."""
        if len(slots) == 0:
            return
        self._begin(slots, rng)
        self._run_frame(slots, np.ones(len(slots), dtype=bool))

    def _begin(self, slots: np.ndarray, rng: np.random.Generator) -> None:
        """Draw new episodes for ``slots``: their inputs, costs and empty counters."""
        self.example[slots] = rng.integers(len(self.split), size=len(slots))
        self.frame[slots] = 0
        self.k_cpt[slots] = self.k_cpt_model.sample_numpy(len(slots), rng)
        self.macs[slots] = 0
        self.spent[slots] = 0
        self.paid[slots] = 0

    def refill(self, finished: Finished, rng: np.random.Generator) -> None:
        """After a step: slots whose episode ended start a new one, the others run their next frame."""
        if finished.slots.size == 0:
            return
        going_on, done = finished.slots[~finished.ended], finished.done
        self.frame[going_on] += 1
        self._begin(done, rng)
        # one run for both: next frames and new episodes meet at the same first junction
        self._run_frame(np.concatenate([going_on, done]), np.repeat([False, True], [len(going_on), len(done)]))

    def _frames(self, slots: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots' current inputs, and the examples they come from (on the device)."""
        pick = torch.from_numpy(self.example[slots]).to(self.device)
        x = self.split.images.index_select(0, pick)
        if self.split.frames > 1:
            x = x[torch.arange(len(slots), device=self.device), torch.from_numpy(self.frame[slots]).to(self.device)]
        return x, pick

    def _run_frame(self, slots: np.ndarray, start: np.ndarray) -> None:
        """Run the slots' current frame from the root to its first junction; ``start`` ``(b,)``:
        the slots whose episode begins with this frame (their memory starts afresh)."""
        self.decisions[slots] = -1
        x, pick = self._frames(slots)
        if self.training and self.trainer.options.augment:
            x = self.task.augment(x, torch.from_numpy(self.sources_at(slots)).to(self.device), self.generator)
        rows = torch.from_numpy(slots).to(self.device)
        if start.any():
            fresh = torch.from_numpy(start).to(self.device)
            memory = self.task.initial_memory(x[fresh])
            if memory is not None:
                if self.memory is None:
                    self.memory = torch.zeros(self.n, *memory.shape[1:], dtype=memory.dtype, device=self.device)
                self.memory[rows[fresh]] = memory
        x = self.task.net_input(x, None if self.memory is None else self.memory.index_select(0, rows))
        if self.training:
            self.images[rows] = x
        self._advance({self.net.root: (x, slots)})

    def move(self, actions: np.ndarray) -> Finished:
        """Every waiting slot takes the sink its action picks; run on to the next junction or leaf.

        Gymnasium's :class:`~gymnasium.error.ResetNeeded` when no slot is waiting: before the
        first :meth:`reset` (every env), or once a single episode has reached its leaf."""
        if not self.waiting:
            raise ResetNeeded("Cannot call step() before calling reset()" if not self.started
                              else "the episode has reached a leaf; call reset() before step()")
        actions = check_actions(actions, self.n, self.layout.action_space.n)
        # every action is checked at its junction before anything moves
        choices = {name: self.layout.sinks(name, actions[group.slots]) for name, group in self.waiting.items()}
        pending = {}
        for name, group in self.waiting.items():
            choice = choices[name]
            self.decisions[group.slots, self.layout.junction_index[name]] = choice
            if self.record_side_exits and self.training and self.split.frames == 1:
                self._record_side_exits(name, group, choice)
            for sink_number, sink in enumerate(self.net.nodes[name].sinks):
                chosen = np.flatnonzero(choice == sink_number)
                if chosen.size == 0:
                    continue
                state = self.net.nodes[sink].reads(group.state)
                if chosen.size < choice.size:
                    state = take(state, torch.from_numpy(chosen).to(self.device))
                pending[sink] = (state, group.slots[chosen])
        self.waiting = {}
        finished = self._advance(pending)
        if self.training and finished.slots.size:
            slots = finished.slots
            self.trainer.record(
                self.images.index_select(0, torch.from_numpy(slots).to(self.device)),
                torch.from_numpy(self.labels_at(slots)).to(self.device),
                self.decisions[slots], self.k_cpt[slots],
            )
        return finished

    @torch.no_grad()
    def _record_side_exits(self, name: str, group: Group, choice: np.ndarray) -> None:
        """Run each exit head of junction ``name`` on the slots that chose another sink."""
        for sink_number, sink in enumerate(self.net.nodes[name].sinks):
            node = self.net.nodes[sink]
            others = np.flatnonzero(choice != sink_number)
            if not node.is_leaf or others.size == 0:
                continue
            rows = torch.from_numpy(others).to(self.device)
            logits = node.transform(take(node.reads(group.state), rows))
            slots = group.slots[others]
            labels = torch.from_numpy(self.labels_at(slots)).to(self.device)
            c_err = self.charged_error(logits, labels).double().cpu().numpy()
            k_cpt = self.k_cpt[slots]
            self.side_exits.append(SideExits(
                self.layout.observe(name, group.descriptor.index_select(0, rows), k_cpt),
                np.full(others.size, sink_number, dtype=np.int64),
                -(c_cpt(k_cpt, self.spent[slots] - self.paid[slots] + self.node_cost[sink]) + c_err),
                self.layout.terminal(k_cpt),
            ))

    def take_side_exits(self) -> SideExits | None:
        """The side exits recorded since the last call, concatenated (None if there are none)."""
        if not self.side_exits:
            return None
        parts, self.side_exits = self.side_exits, []
        return SideExits.concatenate(parts)

    def action_masks(self) -> np.ndarray:
        """``(n, max sinks)`` bool: the valid actions of every slot (all, at a leaf)."""
        at = [None] * self.n
        for name, group in self.waiting.items():
            for slot in group.slots.tolist():
                at[slot] = name
        return self.layout.masks(at)

    def charge(self, finished: Finished) -> np.ndarray:
        """``(n,)`` rewards for the computation since the last charge, and ``-c_err`` at leaves."""
        reward = -c_cpt(self.k_cpt, self.spent - self.paid)
        self.paid[:] = self.spent
        reward[finished.slots] -= finished.c_err
        return reward

    def observe(self) -> np.ndarray:
        """``(n, size)`` float32 observations; slots not waiting get the terminal one."""
        out = torch.zeros(self.n, self.layout.size, device=self.device)
        for name, group in self.waiting.items():
            self.layout.write(out, torch.from_numpy(group.slots).to(self.device), name, group.descriptor)
        out = out.cpu().numpy()
        if self.layout.dynamic_k_cpt:
            out[:, -1] = router_input(self.k_cpt)
        return out

    def infos(self, finished: Finished) -> list[dict]:
        """One info dict per slot: ``macs`` so far, ``label``, ``source``, ``k_cpt``; at a
        leaf also ``leaf`` (name), ``correct`` and ``c_err``."""
        infos = [
            {"macs": m, "label": y, "source": self.source_names[s], "k_cpt": k}
            for m, y, s, k in zip(self.macs.tolist(), self.label.tolist(), self.source.tolist(), self.k_cpt.tolist())
        ]
        for slot, leaf, correct, c_err in zip(finished.slots.tolist(), finished.leaf.tolist(),
                                              finished.correct.tolist(), finished.c_err.tolist()):
            infos[slot].update(leaf=self.net.leaves[leaf], correct=correct, c_err=c_err)
            if self.split.frames > 1:
                infos[slot]["frame"] = int(self.frame[slot])
        return infos

    def charged_error(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """``(b,)`` the c_err a leaf's reward charges: the task's error cost of ``logits``
        ``(b, classes)``, at most :attr:`max_error_cost`."""
        c_err = self.task.error_cost(logits.float(), labels, self.error_cost)
        return c_err if self.max_error_cost is None else c_err.clamp(max=self.max_error_cost)

    @torch.no_grad()
    def _advance(self, pending: dict[str, tuple[State, np.ndarray]]) -> Finished:
        """Run each pending batch through its node and on, in tree order (every parent before
        its sinks), until it waits at a junction or reaches a leaf."""
        if self.net.training:
            self.net.eval()
        finished = []
        for name in self.net.order:
            if not pending:
                break
            if name not in pending:
                continue
            inputs, slots = pending.pop(name)
            node = self.net.nodes[name]
            state = node.transform(inputs)
            self.macs[slots] += self.node_macs[name]
            self.spent[slots] += self.node_cost[name]
            if node.is_leaf:
                finished.append(self._leaf(name, slots, state))
            elif node.is_junction:
                if name in self.waiting:
                    raise RuntimeError(f"slots already wait at {name!r}; start() only refills finished slots")
                self.waiting[name] = Group(slots, state, node.router_input(state))
            else:
                sink = node.sinks[0]
                pending[sink] = (self.net.nodes[sink].reads(state), slots)
        if not finished:
            return Finished.none()
        return Finished(*(np.concatenate(parts) for parts in zip(*finished)))

    def _leaf(self, name: str, slots: np.ndarray, logits: torch.Tensor):
        labels = torch.from_numpy(self.labels_at(slots)).to(self.device)
        c_err = self.charged_error(logits, labels)
        correct = logits.argmax(1) == labels
        leaf = np.full(len(slots), self.net.leaf_index[name], dtype=np.int64)
        ended = self.frame[slots] == self.split.frames - 1
        if self.memory is not None and not ended.all():
            rows = torch.from_numpy(slots).to(self.device)
            memory = self.task.carry(self.memory.index_select(0, rows), self._frames(slots)[0], logits,
                                     torch.from_numpy(leaf).to(self.device))
            self.memory[rows] = memory
        return slots, leaf, c_err.double().cpu().numpy(), correct.cpu().numpy(), ended


    IN_FLIGHT = ("example", "frame", "k_cpt", "macs", "spent", "paid", "decisions", "images", "memory")
    """The per-slot state of the episodes in flight (numpy arrays and tensors)."""

    def state_dict(self) -> dict:
        """The episodes in flight, for a resume that continues them exactly: each slot's
        counters, input and memory, the groups waiting at junctions with their node states, the
        side exits not yet taken and the augmentation generator (numpy arrays as tensors, so
        that ``torch.load(weights_only=True)`` reads them)."""
        def saved(value):
            return torch.from_numpy(value.copy()) if isinstance(value, np.ndarray) else value

        return {
            **{name: saved(getattr(self, name)) for name in self.IN_FLIGHT},
            "waiting": {name: {"slots": saved(group.slots), "state": group.state, "descriptor": group.descriptor}
                        for name, group in self.waiting.items()},
            "side_exits": [{field: saved(getattr(part, field)) for field in ("observations", "actions", "rewards", "terminal")}
                           for part in self.side_exits],
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the episodes :meth:`state_dict` saved (from a traffic of the same net and slots)."""
        for name in self.IN_FLIGHT:
            value = state[name]
            if isinstance(getattr(self, name), np.ndarray):
                value = value.cpu().numpy()
            elif value is not None:
                value = value.to(self.device)
            setattr(self, name, value)
        self.waiting = {name: Group(group["slots"].cpu().numpy(), group["state"], group["descriptor"])
                        for name, group in state["waiting"].items()}
        self.side_exits = [SideExits(*(part[field].cpu().numpy() for field in ("observations", "actions", "rewards", "terminal")))
                           for part in state["side_exits"]]
        self.generator.set_state(state["generator"])


class TrafficControls:
    """What every routing env exposes of its :class:`Traffic`: the task, the net, its feature
    trainer, and the ``nn.Module``-like switch of joint training (``train()`` / ``eval()``)."""

    traffic: Traffic

    @property
    def task(self) -> RoutingTask:
        """The :class:`~routing_rl.envs.task.RoutingTask` the env routes (its dataset, classes,
        sources, memory); ``gym.make``'s wrappers hide it: ``env.unwrapped.task``."""
        return self.traffic.task

    @property
    def net(self) -> RoutedNet:
        return self.traffic.net

    @property
    def trainer(self) -> FeatureTrainer | None:
        return self.traffic.trainer

    @property
    def training(self) -> bool:
        return self.traffic.training

    def train(self, mode: bool = True):
        """Joint training of the feature network on (True) or off (False), like ``nn.Module``."""
        self.traffic.training = bool(mode)
        return self

    def eval(self):
        return self.train(False)
