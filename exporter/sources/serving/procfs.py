"""Finding an engine's processes through /proc, to match them with NVML's process lists.

The engine is found as the process listening on the target's TCP port; its GPU work runs
in that process or in its descendants (vLLM's EngineCore and tensor-parallel workers are
children of the API server). This needs the exporter to share the host's PID namespace
(``hostPID: true`` or running on the host) and to be allowed to read other processes'
``/proc/PID/fd`` (root or CAP_SYS_PTRACE); otherwise nothing is found and attribution
falls through.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

LISTEN = "0A"


def listening_inodes(port: int, root: Path = Path("/proc")) -> set[str]:
    """Socket inodes listening on ``port`` (any local address, IPv4 or IPv6)."""
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (root / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            _, _, hex_port = fields[1].rpartition(":")
            if hex_port and int(hex_port, 16) == port:
                inodes.add(fields[9])
    return inodes


def pid_of_inodes(inodes: set[str], root: Path = Path("/proc")) -> int | None:
    """The first process holding one of the socket ``inodes`` open."""
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in _pids(root):
        fd_dir = root / str(entry) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd) in wanted:
                    return entry
            except OSError:
                continue
    return None


def listener_pid(port: int, root: Path = Path("/proc")) -> int | None:
    return pid_of_inodes(listening_inodes(port, root), root)


def parent_pid(pid: int, root: Path = Path("/proc")) -> int | None:
    try:
        stat = (root / str(pid) / "stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ")".
    rest = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(rest[1])
    except (IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int, root: Path = Path("/proc"), limit: int = 64) -> bool:
    """Whether ``pid`` is ``ancestor`` or one of its descendants."""
    current: int | None = pid
    for _ in range(limit):
        if current is None or current <= 0:
            return False
        if current == ancestor:
            return True
        current = parent_pid(current, root)
    return False


def _pids(root: Path) -> Iterable[int]:
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())
