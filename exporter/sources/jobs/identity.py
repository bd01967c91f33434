"""Parsing what /proc says about one process into a job identity, and nothing else.

Pure functions over bytes and text (the source does the reading), so hostile input is
tested without a kernel. Only the variables in :data:`VARIABLES` are ever looked at; every
other environment entry is skipped without being decoded or kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.readings import JOB_SOURCES, JobIdentity

MAX_VALUE = 128
"""Longest identity value published; a longer one is dropped (``value_too_long``)."""
VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]*")
"""What a published job id may hold: no spaces, quotes, braces or control characters."""

SLURM_JOB = "SLURM_JOB_ID"
PMIX_NAMESPACE = "PMIX_NAMESPACE"
OMPI_JOBID = "OMPI_MCA_ess_base_jobid"
TORCHELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"

VARIABLES: Mapping[str, str] = {
    SLURM_JOB: "slurm",
    PMIX_NAMESPACE: "mpi",
    OMPI_JOBID: "mpi",
    TORCHELASTIC_RUN_ID: "torchrun",
}
"""The only environment variables read, and the source each names."""
_WANTED = tuple((name + "=").encode() for name in VARIABLES)

TORCHRUN_PLACEHOLDER = "none"
"""torchrun's default ``--rdzv-id``: every run started without one shares it, so it names
no job (the process session does instead)."""

_SLURM_DIR = re.compile(r"job_([0-9]{1,20})")


class BadValue(ValueError):
    """A variable or path component that cannot become a label value; ``reason`` says why."""

    def __init__(self, reason: str, name: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.reason = reason
        self.name = name


def environ_variables(raw: bytes, truncated: bool) -> dict[str, bytes]:
    """The allow-listed variables of a NUL-separated ``environ``, raw. When ``truncated``
    (the read hit its cap) the last entry may be cut and is ignored."""
    entries = raw.split(b"\0")
    if truncated:
        entries = entries[:-1]
    found: dict[str, bytes] = {}
    for entry in entries:
        if entry.startswith(_WANTED):
            name, _, value = entry.partition(b"=")
            found.setdefault(name.decode(), value)
    return found


def checked(name: str, raw: bytes) -> str:
    """``raw`` as a job id, or :class:`BadValue` (too long, not text, odd characters)."""
    if len(raw) > MAX_VALUE:
        raise BadValue("value_too_long", name)
    try:
        value = raw.decode("ascii")
    except UnicodeDecodeError:
        raise BadValue("value_invalid", name) from None
    if not VALUE.fullmatch(value):
        raise BadValue("value_invalid", name)
    return value


def slurm_job_of_cgroup(text: str) -> str | None:
    """The Slurm job id in a ``/proc/<pid>/cgroup`` (v1: ``4:memory:/slurm/uid_1000/
    job_42/step_0/task_0``, v2: ``0::/system.slice/slurmstepd.scope/job_42/step_0/...``):
    a ``job_<digits>`` component below one naming slurm."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        parts = path.split("/")
        for i, part in enumerate(parts):
            if "slurm" in part:
                for below in parts[i + 1 :]:
                    match = _SLURM_DIR.fullmatch(below)
                    if match:
                        return match.group(1)
                break
    return None


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` the process identity needs."""

    session: int
    start_ticks: int
    """Clock ticks after boot the process started: with the pid, unique on the node."""
    parent: int = 0
    """The parent's pid (0 when not known)."""


def parse_stat(text: str) -> Stat | None:
    """Session and start time from ``/proc/<pid>/stat``; the command name (field 2) may hold
    spaces and parentheses, so fields are counted from its last ``)``."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        return None
    try:
        return Stat(session=int(fields[3]), start_ticks=int(fields[19]), parent=int(fields[1]))
    except ValueError:
        return None


def strongest(identities: Iterable[JobIdentity]) -> JobIdentity | None:
    """The strongest identity (:data:`JOB_SOURCES` order), ties broken by key: the same
    answer whatever order the processes were listed in."""
    rank = {name: i for i, name in enumerate(JOB_SOURCES)}
    return min(identities, key=lambda j: (rank.get(j.source, len(rank)), j.key), default=None)


def from_process(
    variables: Mapping[str, bytes], cgroup_job: str | None
) -> tuple[JobIdentity | None, list[BadValue]]:
    """The strongest identity the environment or the Slurm cgroup names, and the values
    dropped on the way (each is counted, none published)."""
    found: list[JobIdentity] = []
    bad: list[BadValue] = []
    if cgroup_job is not None:
        found.append(JobIdentity("slurm", cgroup_job))
    for name, raw in variables.items():
        try:
            value = checked(name, raw)
        except BadValue as exc:
            bad.append(exc)
            continue
        if name == TORCHELASTIC_RUN_ID and value == TORCHRUN_PLACEHOLDER:
            continue
        found.append(JobIdentity(VARIABLES[name], value))
    return strongest(found), bad


def session_identity(node: str, session: int, leader_start: int | None) -> JobIdentity:
    """A process session as a job: ``<node>/<session>-<leader start ticks>`` (the start time
    keeps a reused session id a new job), ``<node>/<session>`` when the leader is gone."""
    suffix = "" if leader_start is None else f"-{leader_start}"
    return JobIdentity("process", f"{node}/{session}{suffix}")
