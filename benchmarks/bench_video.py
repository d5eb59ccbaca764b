"""Video routing: frames per second of the learned policy against always-deep, side by side.

Both route the same test clips of ``routing_rl/VideoRouting-v0`` frame by frame through the
same trained net (:func:`routing_rl.training.episodes.run_episodes`: memory carried, only
the chosen path computed); repeats interleave the policies and take medians. The learned
policy is the run named by ``$ROUTING_RL_VIDEO_RUN`` (a finished run directory, any agent);
without it the net is untrained and the oracle stands in for a learned policy, so only the
mechanics are measured, on clips of the images in ``$ROUTING_RL_DATA_DIR`` (else
``../shared/datasets``, else downloaded). Numbers out:

* ``frames_per_second_<policy>`` for learned (or oracle), always-deep and always-cheap;
* ``speedup_vs_deep`` — learned frames/s ÷ always-deep frames/s;
* ``mac_ratio_vs_deep`` — always-deep MACs per frame ÷ the learned policy's.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import torch
from bench_data import default_data_dir
from timing import sync

from routing_rl.agents import video as baselines
from routing_rl.envs.video_task import VideoTask
from routing_rl.training.episodes import run_episodes

CLIPS = 200
REPEATS = 5
RUN_ENV = "ROUTING_RL_VIDEO_RUN"


def run(device: torch.device, task: VideoTask | None = None, clips: int = CLIPS, repeats: int = REPEATS) -> dict:
    """``task``: the clips to route (default: the registered task's, real images)."""
    run_dir = os.environ.get(RUN_ENV)
    if run_dir:
        from routing_rl.app.video import load_run

        config, task, net, learned = load_run(Path(run_dir), device)
        name = f"learned_{config.agent}"
        k_cpt = None if config.dynamic_k_cpt else float(config.k_cpt)
    else:
        task = task or VideoTask(train_clips=1, test_clips=clips, data_dir=default_data_dir())
        task.dataset()
        net = task.make_net(device=device)
        learned, name, k_cpt = baselines.Oracle(task.clips["test"].event), "oracle", None
    test = task.dataset().test
    test = test.subset(torch.arange(min(clips, len(test)))).to(device)
    policies = {name: learned, "always_deep": baselines.ALWAYS_DEEP, "always_cheap": baselines.ALWAYS_CHEAP}
    seconds = {policy: [] for policy in policies}
    macs = {}
    for repeat in range(repeats + 1):  # the first round warms up
        for policy, decide in policies.items():
            sync(device)
            start = time.perf_counter()
            episodes = run_episodes(net, task, test, decide, k_cpt)
            sync(device)
            if repeat:
                seconds[policy].append(time.perf_counter() - start)
            macs[policy] = float(episodes.macs.double().mean())
    frames = test.labels.numel()
    fps = {policy: frames / statistics.median(times) for policy, times in seconds.items()}
    result = {f"frames_per_second_{policy}": value for policy, value in fps.items()}
    result.update({f"macs_per_frame_{policy}": value for policy, value in macs.items()})
    result["learned_policy"] = name
    result["speedup_vs_deep"] = fps[name] / fps["always_deep"]
    result["mac_ratio_vs_deep"] = macs["always_deep"] / macs[name]
    result["frames"] = frames
    return result
