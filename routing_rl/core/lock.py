"""One writer per folder: a lock file naming the process that owns the folder.

The lock is created with ``O_CREAT | O_EXCL`` (atomic on POSIX filesystems, NFS v3 and later
included), so of two processes that try at once exactly one gets it. It holds one JSON line,
``{"pid": ..., "host": ..., "started": <UNIX time>}``, written in the same breath, so a
refusal can name the owner as ``pid@host``. A lock whose process has died on this host
(``kill -9``, a power cut's reboot) is stale: the next process takes it over with a warning.
A lock from another host cannot be checked from here and is refused; its message says how to
clear it by hand.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


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
    try:
        owner = json.loads(text)
    except ValueError:
        return None
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int) or not isinstance(owner.get("host"), str):
        return None
    return owner


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
                text = self.path.read_text()
            except FileNotFoundError:
                continue
            if not text:  # created an instant ago, its line not written yet
                time.sleep(0.1)
                continue
            owner = _owner(text)
            if owner is None:
                break
            if owner["host"] != socket.gethostname() or _alive(owner["pid"], owner.get("started")):
                raise LockedError(f"{self.path} is held by process {describe(owner)}; wait for it to finish or "
                                  "stop it, or delete the lock if that process is gone", owner)
            if self._take_over(text):
                warn(f"warning: {self.path} was left by process {describe(owner)}, which is no longer running; "
                     "taking it over")
        if text is not None and _owner(text) is None:
            raise LockedError(f"{self.path} exists but is not a lock file written by routing-rl; if no run is "
                              "using the folder, delete it and start again")
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
        if aside.read_text() != stale:  # a live owner's fresh lock: put it back
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
            if _owner(self.path.read_text()) == self.owner:
                self.path.unlink()
        except FileNotFoundError:
            pass

def live_owner(path: Path) -> dict | None:
    """The owner of the lock file ``path`` when another process may still hold it (alive on
    this host, or on another host, which cannot be checked); None when there is no lock, it
    is stale or it is this process's. Read-only: for refusing early, before
    :meth:`FolderLock.acquire` decides."""
    try:
        owner = _owner(Path(path).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    if owner is None or (owner["pid"], owner["host"]) == (os.getpid(), socket.gethostname()):
        return None
    return owner if owner["host"] != socket.gethostname() or _alive(owner["pid"], owner.get("started")) else None
