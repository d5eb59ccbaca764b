"""One writer per folder: a lock file naming the process that owns the folder.

The lock is created with ``O_CREAT | O_EXCL`` (atomic on POSIX filesystems, NFS v3 and later
included), so of two processes that try at once exactly one gets it. It holds one JSON line,
``{"pid": ..., "host": ..., "started": <UNIX time>}``, written in the same breath, so a
refusal can name the owner as ``pid@host``. A lock whose process has died on this host
(``kill -9``, a power cut's reboot) is stale: the next process takes it over with a warning.
A lock from another host cannot be checked from here and is refused; its message says how to
clear it by hand.

A lock is read without blocking and only when it is a regular file (a FIFO or a folder named
like it would hang or fail the read), and only a lock whose fields are what this module
writes (a process id, a host, a start time that is a time and not in the future) is judged
alive or stale: anything else is refused, never deleted.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import stat
import sys
import time
from pathlib import Path

MAX_PID = 2**31 - 1
"""The largest process id (``pid_t`` is a signed 32-bit integer)."""
CLOCK_SKEW = 86_400.0
"""How far (seconds) a lock's start time may lie ahead of this host's clock: another host's
clock may run ahead; a start time further ahead is not one this module wrote."""


class LockedError(RuntimeError):
    """The folder is locked by a live process (or one that cannot be checked); ``owner``:
    the lock's fields, None when the lock file cannot be read as one."""

    def __init__(self, message: str, owner: dict | None = None):
        super().__init__(message)
        self.owner = owner


def _alive(pid: int, since=None) -> bool:
    """Whether process ``pid`` exists on this host (a process of another user counts) and,
    where Linux's /proc tells, had started by the UNIX time ``since``: a later process with
    the same id (ids are reused, a container restarts from low ones) is not the owner."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    started = _start_time(pid)
    return not isinstance(since, (int, float)) or started is None or started <= since + 1  # /proc's ticks, rounded


def _start_time(pid: int) -> float | None:
    """When process ``pid`` started (UNIX time), from /proc; None where there is no /proc."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _owner(text: str) -> dict | None:
    """The lock's fields, or None when the file is not a lock this module wrote."""
    return None if _problem(text) else json.loads(text)


def _problem(text: str) -> str | None:
    """Why ``text`` is not a lock this module wrote (None when it is one)."""
    try:
        owner = json.loads(text)
    except (ValueError, RecursionError):
        return "it is not a JSON line"
    if not isinstance(owner, dict) or not isinstance(owner.get("host"), str):
        return "it names no pid and host"
    pid, started = owner.get("pid"), owner.get("started")
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= MAX_PID:
        return f"its pid {pid!r} is not a process id"
    if started is not None and (isinstance(started, bool) or not isinstance(started, (int, float))
                                or (isinstance(started, float) and not math.isfinite(started)) or started < 0):
        return f"its start time {started!r} is not a time"
    if started is not None and started > time.time() + CLOCK_SKEW:
        return f"its start time {started!r} lies in the future"
    return None


def _read(path: Path) -> str:
    """The text of the lock file ``path``, read without blocking; LockedError when ``path``
    is not a regular file (a FIFO would block the read, a folder fail it), FileNotFoundError
    when it is gone."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        handle = os.open(path, flags)
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        raise LockedError(_not_a_file(path, "a symbolic link")) from None
    mode = os.fstat(handle).st_mode
    if not stat.S_ISREG(mode):
        os.close(handle)
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise LockedError(_not_a_file(path, kind))
    with os.fdopen(handle, "rb") as stream:
        return stream.read().decode(errors="replace")


def _not_a_file(path: Path, kind: str) -> str:
    return (f"{path} is {kind}, not a lock file written by routing-rl; if no run is using the folder, remove it "
            "and start again")


def describe(owner: dict) -> str:
    """``pid@host since <local time>``."""
    started = owner.get("started")
    since = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}" if isinstance(started, (int, float)) else ""
    return f"{owner['pid']}@{owner['host']}{since}"


class FolderLock:
    """The lock file ``path``; ``acquire()`` takes it or raises :class:`LockedError`,
    ``release()`` removes it if it is still this process's."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        self.held = False

    def acquire(self, warn=lambda line: print(line, file=sys.stderr)) -> FolderLock:
        """Take the lock; a stale one (its process dead, on this host) is taken over with
        ``warn(line)``. Raises LockedError naming the owner when a live process holds it."""
        text = None
        for _ in range(5):  # released, taken over or being written by another process meanwhile: look again
            if self._create():
                self.held = True
                return self
            try:
                text = _read(self.path)
            except FileNotFoundError:
                continue
            if not text:  # created an instant ago, its line not written yet
                time.sleep(0.1)
                continue
            problem = _problem(text)
            if problem is not None:
                raise LockedError(f"{self.path} exists but is not a lock file written by routing-rl ({problem}); "
                                  "if no run is using the folder, delete it and start again")
            owner = json.loads(text)
            if owner["host"] != socket.gethostname() or _alive(owner["pid"], owner.get("started")):
                raise LockedError(f"{self.path} is held by process {describe(owner)}; wait for it to finish or "
                                  "stop it, or delete the lock if that process is gone", owner)
            warning = (f"warning: {self.path} was left by process {describe(owner)}, which is no longer running; "
                       "taking it over")
            if self._take_over(text):
                warn(warning)
        if text == "":
            raise LockedError(f"{self.path} exists but is empty, not a lock file written by routing-rl; if no run "
                              "is using the folder, delete it and start again")
        raise LockedError(f"{self.path} keeps changing hands; another process is starting on this folder")

    def _create(self) -> bool:
        try:
            handle = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(handle, "w") as stream:
            stream.write(json.dumps(self.owner) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        return True

    def _take_over(self, stale: str) -> bool:
        """Remove the stale lock holding ``stale``, unless someone replaced it meanwhile: the
        lock is first renamed aside (atomic: of two processes only one moves it), then checked."""
        aside = self.path.with_name(f".{self.path.name}.{os.getpid()}.stale")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        try:
            same = _read(aside) == stale
        except LockedError:  # replaced by something that is not a lock: put it back for the next look to refuse
            same = False
        if not same:  # a live owner's fresh lock: put it back
            try:
                os.link(aside, self.path)
            except FileExistsError:
                pass
            aside.unlink()
            return False
        aside.unlink()
        return True

    def release(self) -> None:
        """Remove the lock file if this process still holds it."""
        if not self.held:
            return
        self.held = False
        try:
            if _owner(_read(self.path)) == self.owner:
                self.path.unlink()
        except (FileNotFoundError, LockedError):  # gone, or replaced by something that is not this lock
            pass


def live_owner(path: Path) -> dict | None:
    """The owner of the lock file ``path`` when another process may still hold it (alive on
    this host, or on another host, which cannot be checked); None when there is no lock, it
    is stale or it is this process's. Read-only: for refusing early, before
    :meth:`FolderLock.acquire` decides. LockedError when ``path`` is not a regular file."""
    try:
        owner = _owner(_read(Path(path)))
    except (FileNotFoundError, NotADirectoryError):
        return None
    if owner is None or (owner["pid"], owner["host"]) == (os.getpid(), socket.gethostname()):
        return None
    return owner if owner["host"] != socket.gethostname() or _alive(owner["pid"], owner.get("started")) else None
