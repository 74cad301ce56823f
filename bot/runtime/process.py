"""Who this process is, written so that another process can tell whether it is still alive.

Runs are stamped with their process's id. The sweeper of any replica later asks whether that process
is gone. It provably is when it ran on the same host and in the same pid namespace and its pid is now
free, or is now the asker's own (a later start that got the same pid). Otherwise (another machine,
another container) only its heartbeat can say.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcessId:
    """host : pid namespace : pid : boot (random per start, so a reused pid is a different process)."""

    host: str
    pid_ns: str
    pid: int
    boot: str

    @classmethod
    def current(cls) -> ProcessId:
        return cls(os.uname().nodename, _pid_namespace(), os.getpid(), uuid.uuid4().hex[:8])

    @classmethod
    def parse(cls, text: str) -> ProcessId | None:
        """The id back from its string; None for owners written by older releases (host:pid)."""
        parts = text.rsplit(":", 3)
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])

    def __str__(self) -> str:
        return f"{self.host}:{self.pid_ns}:{self.pid}:{self.boot}"

    def provably_dead(self, asker: ProcessId) -> bool:
        """True when this process shared the asker's host and pid namespace and is gone."""
        if (self.host, self.pid_ns) != (asker.host, asker.pid_ns) or not self.pid_ns:
            return False  # another machine or container: only its heartbeat can tell
        if self.pid == asker.pid:
            return self.boot != asker.boot  # our pid, another start: that process is gone
        return not _pid_alive(self.pid)


def _pid_namespace() -> str:
    """The pid namespace's inode: pids mean the same process only within one namespace."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""  # no /proc: never judge by pid


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process holds that pid now
    return True


THIS_PROCESS = ProcessId.current()
