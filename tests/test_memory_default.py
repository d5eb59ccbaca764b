"""A library user's inference gets the allocator setting the command-line tools apply."""

import os
import subprocess
import sys

import pytest
import torch

from routing_rl.core import memory
from routing_rl.core.execution import dynamic
from routing_rl.nets.multiscale import static

SCRIPT = """
import platform, torch
from routing_rl.core import memory
from routing_rl.core.execution import dynamic
from routing_rl.nets.multiscale import static
assert not memory._retained
dynamic(static(1).eval(), torch.rand(2, 3, 32, 32))
print(memory._retained)
"""


@pytest.mark.parametrize("opt_out, calls", [(None, 1), ("0", 0)])
def test_routing_on_the_cpu_asks_for_the_setting_once(opt_out, calls, monkeypatch):
    asked = []
    monkeypatch.setattr(memory, "_asked", False)
    monkeypatch.setattr(memory, "retain_freed_memory", lambda: asked.append(True))
    if opt_out is None:
        monkeypatch.delenv(memory.OPT_OUT, raising=False)
    else:
        monkeypatch.setenv(memory.OPT_OUT, opt_out)
    net = static(1).eval()
    for _ in range(3):
        dynamic(net, torch.rand(2, 3, 32, 32))
    assert len(asked) == calls


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the thresholds are glibc's")
@pytest.mark.parametrize("opt_out, retained", [(None, "True"), ("0", "False")])
def test_the_first_routed_execution_on_the_cpu_keeps_freed_memory_unless_opted_out(opt_out, retained):
    env = {k: v for k, v in os.environ.items() if k != "ROUTING_RL_RETAIN_FREED_MEMORY"}
    if opt_out is not None:
        env["ROUTING_RL_RETAIN_FREED_MEMORY"] = opt_out
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == retained
