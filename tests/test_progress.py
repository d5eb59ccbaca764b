"""Progress where stderr is not a terminal: one line at a steady interval and after each
validation, for the paper's learners and the SB3 agents alike (routing_rl.training.monitor)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from synthetic_data import write_data_folder

from routing_rl.training.monitor import PROGRESS_SECONDS_ENV, Progress, duration, progress_seconds

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "train_agent.py"
RECORD = re.compile(
    r"^progress (?P<what>[\w -]+) \| iteration (?P<iteration>\d+)/(?P<total>\d+) \(\d+%\) \| (?P<rate>[\d,]+) images/s"
    r"(?: \| loss (?P<loss>[-\d.e+]+))?(?: \| val accuracy (?P<val>[\d.]+)% \(iteration (?P<at>\d+)\))?"
    r" \| elapsed \w+ \| ETA (?P<eta>\w+)$"
)


def records(text: str) -> list[re.Match]:
    lines = [line for line in text.splitlines() if line.startswith("progress ")]
    matches = [RECORD.match(line) for line in lines]
    assert all(matches), f"malformed progress lines: {[l for l, m in zip(lines, matches) if not m]}"
    return matches


def test_lines_at_the_interval_and_after_each_validation():
    stream = io.StringIO()  # not a terminal
    progress = Progress(total=10, description="actor chain", interval=3600, stream=stream)
    progress.update(1, 16, loss=2.5)
    assert stream.getvalue() == "", "no line before the interval has passed"
    progress.update(1, 16, loss=2.25)
    progress.validated(0.5, 2)
    (line,) = records(stream.getvalue())
    assert line["what"] == "actor chain" and (line["iteration"], line["total"]) == ("2", "10")
    assert float(line["loss"]) == 2.25 and float(line["val"]) == 50.0 and line["at"] == "2"
    assert int(line["rate"].replace(",", "")) > 0 and line["eta"] != "unknown"

    progress.interval = 0  # every update is past the interval now
    progress.update(3, 48, loss=1.0)
    last = records(stream.getvalue())[-1]
    assert last["iteration"] == "5" and float(last["loss"]) == 1.0 and last["at"] == "2", "the latest validation stays shown"
    progress.close()


def test_eta_is_the_iterations_left_at_the_pace_so_far():
    stream = io.StringIO()
    progress = Progress(total=100, initial=50, interval=3600, stream=stream)  # resumed at 50
    progress.started -= 10.0  # 10 s for the 10 iterations below
    progress.update(10, 160)
    assert "| iteration 60/100 (60%) |" in progress.line()
    assert progress.line().endswith("ETA 40s"), progress.line()
    assert [duration(s) for s in (42, 187, 7500)] == ["42s", "3m07s", "2h05m"]


def test_the_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(PROGRESS_SECONDS_ENV, raising=False)
    assert progress_seconds() == 30
    monkeypatch.setenv(PROGRESS_SECONDS_ENV, "0.5")
    assert Progress(total=1, stream=io.StringIO()).interval == 0.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv(PROGRESS_SECONDS_ENV, bad)
        with pytest.raises(ValueError, match=f"must be a positive number of seconds, got '{bad}'"):
            progress_seconds()


@contextmanager
def pseudo_terminal(columns: int, lines: int):
    """A pseudo-terminal that reports ``columns`` x ``lines`` (as ``script`` and some notebook
    shells report 0 x 0): yields the stream to write to and a function returning what it showed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    stream = os.fdopen(follower, "w")

    def shown() -> str:
        stream.flush()
        found = b""
        while select.select([leader], [], [], 0.2)[0]:
            found += os.read(leader, 65536)
        return found.decode(errors="replace").replace("\r\n", "\n")

    try:
        yield stream, shown
    finally:
        stream.close()
        os.close(leader)


@pytest.mark.parametrize("columns, lines", [(0, 0), (0, 24), (80, 0)])
def test_a_terminal_reporting_no_size_gets_the_line_records(columns, lines):
    with pseudo_terminal(columns, lines) as (stream, shown):
        assert stream.isatty() and tuple(os.get_terminal_size(stream.fileno())) == (columns, lines)
        progress = Progress(total=4, description="actor chain", interval=0, stream=stream)
        for _ in range(4):
            progress.update(1, 16, loss=1.5)
        progress.validated(0.75, 4)
        progress.close()
        found = records(shown())
    assert [m["iteration"] for m in found] == ["1", "2", "3", "4", "4"] and found[-1]["val"] == "75.00"


def test_a_terminal_of_ordinary_size_gets_the_bar():
    with pseudo_terminal(80, 24) as (stream, shown):
        progress = Progress(total=4, description="actor chain", interval=0, stream=stream)
        progress.update(4, 64, loss=1.5)
        progress.close()
        text = shown()
    assert "actor chain: 100%" in text and "4/4" in text and not records(text)


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    return write_data_folder(tmp_path_factory.mktemp("data"))


def train(tiny_data, tmp_path, *args, seconds="0.000001"):
    """The CLI in a subprocess, stderr into a pipe (not a terminal)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", ROUTING_RL_CACHE=str(tmp_path / "cache"), **{PROGRESS_SECONDS_ENV: seconds})
    command = [sys.executable, str(SCRIPT), "--preset", "smoke", "--iterations", "6", "--eval-every", "3",
               "--data-dir", str(tiny_data), "--download", "false", "--validation-fraction", "0.4",
               "--logdir", str(tmp_path), "--run-name", "run", "--device", "cpu", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["actor", "dqn"])
def test_a_run_without_a_terminal_prints_progress_records(agent, tiny_data, tmp_path):
    started = time.monotonic()
    done = train(tiny_data, tmp_path, "--agent", agent)
    assert done.returncode == 0, done.stderr
    found = records(done.stderr)
    assert found and all(m["what"] == f"{agent} chain" and m["total"] == "6" for m in found)
    iterations = [int(m["iteration"]) for m in found]
    assert iterations == sorted(iterations) and iterations[-1] >= 6  # SB3 may finish a step past the budget
    assert len(found) >= 2 and all(m["loss"] is not None for m in found)
    assert all(int(m["rate"].replace(",", "")) > 0 for m in found)
    validated = [int(m["at"]) for m in found if m["val"] is not None]
    assert validated and validated[-1] >= 6, f"a line after the last validation: {validated}"
    if agent == "actor":
        assert {3, 6} <= set(validated)
    assert time.monotonic() - started < 300


@pytest.mark.slow
def test_a_bad_interval_is_refused_before_anything_is_written(tiny_data, tmp_path):
    done = train(tiny_data, tmp_path, "--agent", "actor", seconds="often")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"train_agent.py: error: ${PROGRESS_SECONDS_ENV} must be a positive number of seconds, got 'often'; "
        "unset it for the default (30)"]
    assert not (tmp_path / "run").exists()
