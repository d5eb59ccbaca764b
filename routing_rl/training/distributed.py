"""Data-parallel training across the processes ``torchrun`` starts (NCCL on GPUs, gloo on CPUs).

Every process holds the whole net and draws the same global batch: the batch sampler, the
augmentation and the learner's generator are seeded alike and consume alike, so their states
never diverge and rank 0's checkpoint resumes every rank. Each process trains on its
contiguous shard of the global batch (:meth:`Distributed.shard`).

Why not ``DistributedDataParallel``: routed execution gathers a data-dependent sub-batch at
every node, so which parameters receive gradients changes from process to process and from
step to step, which DDP's bucketed hooks do not allow. Instead each process scales its loss by
its shard's share of the global batch and, after ``backward()``, :meth:`Distributed.reduce_gradients`
sums every gradient across processes in one flat ``all_reduce``. Because the loss terms are
means over the batch (or identical on every process, like c_mod), the sum of the scaled shard
gradients is the gradient of the global batch's loss. The statistics learners read off the
batch — c_mod's mean node usage, TALR's mean ``p²``, the logged means — are sums reduced the
same way (:meth:`Distributed.sum`, :meth:`Distributed.mean_scalars`), never per-process
means or norms. Batch norm layers become :class:`SyncedBatchNorm`, which normalises with the
global (sub-)batch's statistics; torch's ``SyncBatchNorm`` would do that on GPUs only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from routing_rl.nets.router import RouterBatchNorm

ENVIRONMENT = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
"""What ``torchrun`` sets in every process it starts."""


@dataclass
class Distributed:
    """This process's place among ``world_size`` data-parallel training processes."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device | None = None  # set by start()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Distributed | None:
        """The torchrun process this is (from ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), or None
        when it was not started by torchrun."""
        if "WORLD_SIZE" not in environ:
            return None
        try:
            rank, world_size, local_rank = (int(environ.get(name, "0")) for name in ENVIRONMENT)
        except ValueError:
            raise ValueError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers; start the run with torchrun "
                             f"(got {', '.join(f'{n}={environ.get(n)!r}' for n in ENVIRONMENT)})") from None
        if not 0 <= rank < world_size:
            raise ValueError(f"RANK={rank} is not below WORLD_SIZE={world_size}; start the run with torchrun")
        return cls(rank, world_size, local_rank)

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes logs, checkpoints and metrics."""
        return self.rank == 0

    def place(self, device: torch.device) -> torch.device:
        """The device this process trains on: ``cuda:LOCAL_RANK`` for CUDA, ``device`` otherwise."""
        if device.type != "cuda":
            return device
        if device.index is not None and self.world_size > 1:
            raise ValueError(f"under torchrun each process uses the GPU cuda:LOCAL_RANK; pass --device cuda, not {device}")
        if self.local_rank >= torch.cuda.device_count():
            raise ValueError(f"LOCAL_RANK={self.local_rank} but this machine has {torch.cuda.device_count()} GPU(s); "
                             "lower --nproc_per_node")
        return torch.device("cuda", self.local_rank)

    def start(self, device: torch.device) -> None:
        """Join the process group (rendezvous from torchrun's ``MASTER_ADDR``/``MASTER_PORT``):
        NCCL for CUDA devices, gloo otherwise."""
        self.device = device
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=self.rank, world_size=self.world_size)

    def stop(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def shard(self, size: int) -> slice:
        """This process's contiguous part of a global batch of ``size`` examples; the parts'
        sizes differ by at most one."""
        if size < self.world_size:
            raise ValueError(f"a batch of {size} cannot be shared by {self.world_size} processes; "
                             "raise --batch-size or lower the number of processes")
        base, extra = divmod(size, self.world_size)
        start = self.rank * base + min(self.rank, extra)
        return slice(start, start + base + (self.rank < extra))

    def share(self, size: int) -> float:
        """This process's shard size over the global batch size ``size``."""
        part = self.shard(size)
        return (part.stop - part.start) / size

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """A new tensor: ``tensor`` summed over the processes (no gradient)."""
        total = tensor.detach().clone()
        dist.all_reduce(total)
        return total

    def batch_mean(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` ``(b, ...)``, this process's shard, averaged over the global batch: the
        shards' sums and sizes summed over the processes (one ``all_reduce``), never a mean of
        means. No gradient."""
        local = torch.cat([values.detach().sum(0).reshape(-1), values.new_tensor([values.shape[0]])])
        total = self.sum(local)
        return (total[:-1] / total[-1]).view(values.shape[1:])

    def broadcast(self, value: object) -> object:
        """Rank 0's ``value`` (any picklable object), on every process."""
        holder = [value]
        dist.broadcast_object_list(holder, src=0, device=self.device if self.device.type == "cuda" else None)
        return holder[0]

    def reduce_gradients(self, parameters: list[nn.Parameter]) -> None:
        """Sum the gradients of ``parameters`` over the processes, in one flat ``all_reduce``.

        A parameter that no process gave a gradient keeps ``grad = None``, so the optimiser
        leaves it (and its momentum) alone, exactly as in one process where no example
        reached its node.
        """
        if not parameters:
            return
        present = [p.grad is not None for p in parameters]
        grads = [p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1) for p in parameters]
        flat = torch.cat(grads + [torch.tensor(present, dtype=grads[0].dtype, device=grads[0].device)])
        dist.all_reduce(flat)
        totals = flat[: -len(parameters)].split([p.numel() for p in parameters])
        for p, total, anywhere in zip(parameters, totals, flat[-len(parameters):].tolist()):
            p.grad = total.view_as(p) if anywhere else None

    def mean_scalars(self, values: Mapping[str, float], share: float) -> dict[str, float]:
        """Logged scalars averaged over the processes, each weighted by its ``share`` of the
        global batch (every process must log the same keys)."""
        if not values:
            return {}
        local = torch.tensor([float(v) * share for v in values.values()], dtype=torch.float64, device=self.device)
        return dict(zip(values, self.sum(local).tolist()))


class _SumOverProcesses(torch.autograd.Function):
    """``all_reduce`` that gradients flow through: each process's input receives the sum of
    every process's gradient of the output."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        total = tensor.clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        total = grad.clone()
        dist.all_reduce(total)
        return total


class SyncedBatchNorm(_BatchNorm):
    """Batch norm whose training statistics are those of the global batch across processes.

    In training mode with a process group, the per-channel sums and the count, then the sums
    of squared deviations, are summed over the processes (two ``all_reduce`` calls forward,
    two backward), so every process normalises with the statistics one process would compute
    on the whole batch and updates the running statistics identically. A process may hold no
    example at all (a routed node that only other processes' examples reached); it still
    takes part. The count never leaves the device (no wait for the GPU): the running
    statistics move only where it exceeds one, as when one process runs the layer on the
    global batch or skips it. Without a process group, in eval mode, or without gradients
    (recalibrating running statistics on data every process holds whole) it is plain batch norm,
    but for a router's lone example, normalised by the running statistics there too.

    Args:
        lone_example_running_stats: with one value per channel in the global batch, normalise
            with the running statistics (:class:`~routing_rl.nets.router.RouterBatchNorm`'s
            rule; other batch norm layers output their bias there, where torch would raise).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 lone_example_running_stats: bool = False):
        super().__init__(num_features, eps, momentum)
        self.lone_example_running_stats = lone_example_running_stats

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {x.dim()}D input)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and torch.is_grad_enabled() and dist.is_initialized()):
            if self.lone_example_running_stats and self.training and x.shape[0] == 1:  # recalibrating, one example here
                return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
            return super().forward(x)
        self._check_input_dim(x)
        channels = x.shape[1]
        dims = [0, *range(2, x.dim())]
        shape = [1, channels] + [1] * (x.dim() - 2)
        if self.lone_example_running_stats:  # with copies: the running statistics move below
            lone = F.batch_norm(x, self.running_mean.clone(), self.running_var.clone(), self.weight, self.bias,
                                False, 0.0, self.eps)
        sums = _SumOverProcesses.apply(torch.cat([x.sum(dims), x.new_tensor([x.numel() // max(channels, 1)])]))
        count = sums[-1]
        mean = sums[:-1] / count.clamp_min(1)
        centred = x - mean.view(shape)
        variance = _SumOverProcesses.apply(centred.square().sum(dims)) / count.clamp_min(1)
        with torch.no_grad():
            moves = count > 1
            self.num_batches_tracked.add_(moves.long())
            # momentum None: a cumulative average, as torch's batch norm keeps then
            factor = self.momentum if self.momentum is not None else 1.0 / self.num_batches_tracked.clamp_min(1).to(mean.dtype)
            unbiased = variance * (count / (count - 1).clamp_min(1))
            self.running_mean.copy_(torch.where(moves, self.running_mean.lerp(mean, factor), self.running_mean))
            self.running_var.copy_(torch.where(moves, self.running_var.lerp(unbiased, factor), self.running_var))
        out = centred * (torch.rsqrt(variance + self.eps) * self.weight).view(shape) + self.bias.view(shape)
        return torch.where(count == 1, lone, out) if self.lone_example_running_stats else out


def synchronise_batch_norm(module: nn.Module) -> nn.Module:
    """Replace every batch norm layer inside ``module`` by a :class:`SyncedBatchNorm` that
    shares its parameters and buffers (optimisers and state-dict keys are unaffected)."""
    for name, child in module.named_children():
        if isinstance(child, _BatchNorm) and not isinstance(child, SyncedBatchNorm):
            if not (child.affine and child.track_running_stats):
                raise ValueError(f"{name}: only affine batch norm with running statistics can be synchronised")
            synced = SyncedBatchNorm(child.num_features, child.eps, child.momentum,
                                     lone_example_running_stats=isinstance(child, RouterBatchNorm))
            synced.weight, synced.bias = child.weight, child.bias
            synced.running_mean, synced.running_var = child.running_mean, child.running_var
            synced.num_batches_tracked = child.num_batches_tracked
            synced.train(child.training)
            setattr(module, name, synced)
        else:
            synchronise_batch_norm(child)
    return module
