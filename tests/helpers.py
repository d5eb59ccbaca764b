"""Small builders shared by the tests."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

from routing_rl.core.graph import Node, RoutedNet
from routing_rl.nets.router import Router


def randomize_routers(net: RoutedNet, x: torch.Tensor, seed: int = 0) -> RoutedNet:
    """Give every router's (zero-initialised) last layer random weights, and centre each
    sink's score over ``x``, so that argmax routing spreads ``x`` over many leaves."""
    generator = torch.Generator().manual_seed(seed)
    was_training = net.training
    net.eval()
    with torch.no_grad():
        for name in net.junctions:
            last = net.nodes[name].router.layers[-1]
            last.weight.copy_(torch.randn(last.weight.shape, generator=generator))
            last.bias.zero_()
        scores = net(x.to(next(net.parameters()).dtype)).scores
        for name in net.junctions:
            net.nodes[name].router.layers[-1].bias.copy_(-scores[name].mean(0))
    return net.train(was_training)


def varied_images(batch: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Images whose brightness and colour vary strongly between examples."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, 3, 32, 32, generator=generator)
    x = x * torch.rand(batch, 1, 1, 1, generator=generator) * 4 + torch.randn(batch, 3, 1, 1, generator=generator)
    return x.to(dtype)


def vector_tree(k_cpt_input: bool = False, features: int = 6, classes: int = 3) -> RoutedNet:
    """A non-image routing tree on flat vectors: a 3-way root junction, one plain node,
    one 2-way junction; five leaves."""

    def mlp(n_in: int, n_out: int) -> nn.Module:
        return nn.Sequential(nn.Linear(n_in, n_out), nn.ReLU())

    nodes = {
        "root": Node(mlp(features, 8), ["leafA", "mid", "fork"], Router(8, 3, k_cpt_input)),
        "leafA": Node(nn.Linear(8, classes)),
        "mid": Node(mlp(8, 4), ["leafB"]),
        "leafB": Node(nn.Linear(4, classes)),
        "fork": Node(mlp(8, 5), ["leafC", "leafD"], Router(5, 2, k_cpt_input)),
        "leafC": Node(nn.Linear(5, classes)),
        "leafD": Node(nn.Linear(5, classes)),
    }
    return RoutedNet(nodes, root="root", input_shape=(features,), classes=classes, k_cpt_input=k_cpt_input)


GUIDE_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def guide_blocks(guide: Path) -> list[tuple[str, str | None, str]]:
    """(language, file name or None, code) of every fenced block of a docs page, in order."""
    out = []
    for language, info, code in GUIDE_BLOCK.findall(Path(guide).read_text()):
        title = re.search(r'title="([^"]+)"', info)
        out.append((language, title.group(1) if title else None, code))
    return out


def run_guide(guide: Path, folder: Path, env: dict) -> list[subprocess.CompletedProcess]:
    """Run a docs page as written, in ``folder``: a block with a ``title`` is written to that
    file, a ``python`` block runs as a script and any other as bash, except ``text`` blocks
    (shown, not run); returns each run block's finished process (its ``stdout``, ``stderr``).
    Fails naming the first block that fails."""
    outputs = []
    for number, (language, title, code) in enumerate(guide_blocks(guide)):
        if title is not None:
            path = folder / title
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code)
            continue
        if language == "text":
            continue
        if language == "python":
            script = folder / f"guide_block_{number}.py"
            script.write_text(code)
            command = [sys.executable, str(script)]
        else:
            command = ["bash", "-euo", "pipefail", "-c", code]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"block {number} failed:\n{code}\n{done.stdout}\n{done.stderr}"
        outputs.append(done)
    return outputs


def flat_config(config) -> dict:
    """``config``'s config.json as the code before the learners' options nested wrote it: every
    option of :data:`~routing_rl.training.config.BEFORE_NESTING` a top-level field."""
    from routing_rl.training.config import BEFORE_NESTING

    values = json.loads(config.to_json())
    options = values.pop("learner_options")
    return {**BEFORE_NESTING, **options, **values}
