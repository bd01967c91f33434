"""Parsing what /proc says about one process into a job identity, and nothing else.

Pure functions over bytes and text (the source does the reading), so hostile input is
tested without a kernel. Only the variables :func:`environment` names are ever looked at; every
other environment entry is skipped without being decoded or kept.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from exporter.readings import JobIdentity, JobSource, strongest

MAX_VALUE = 128
"""Longest identity value published; a longer one is dropped (``value_too_long``)."""
VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]*")
"""What a published job id may hold: no spaces, quotes, braces or control characters."""

SLURM = JobSource("slurm", 50, spans_nodes=True, variables=("SLURM_JOB_ID",))
"""A Slurm job: the job's cgroup (authoritative) or ``SLURM_JOB_ID`` checked against it."""
MPI = JobSource("mpi", 30, spans_nodes=True,
                variables=("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"))
"""An MPI launch: its PMIx namespace (Open MPI 5, PRRTE, Slurm's PMIx plugin) or Open MPI
4's job id."""
TORCHRUN = JobSource("torchrun", 20, spans_nodes=True, variables=("TORCHELASTIC_RUN_ID",))
"""A torchrun rendezvous id."""
PROCESS = JobSource("process", 10, spans_nodes=False)
"""A process session: the weakest word, what names a job nothing else names."""

SLURM_JOB, = SLURM.variables
PMIX_NAMESPACE, OMPI_JOBID = MPI.variables
TORCHELASTIC_RUN_ID, = TORCHRUN.variables


@cache
def environment() -> Mapping[str, JobSource]:
    """The only environment variables read, and the source each names: every
    :attr:`JobSource.variables` of the sources declared in this module (a new source read
    from the environment is one more declaration here, nothing else)."""
    return {name: source for source in globals().values() if isinstance(source, JobSource)
            for name in source.variables}


@cache
def _wanted() -> tuple[bytes, ...]:
    return tuple((name + "=").encode() for name in environment())


TORCHRUN_PLACEHOLDER = "none"
"""torchrun's default ``--rdzv-id``: every run started without one shares it, so it names
no job (the process session does instead)."""

_JOB_DIR = re.compile(r"job_([0-9]{1,20})")
_STEPD_SCOPE = re.compile(r"(?:[A-Za-z0-9._-]{1,64}_)?slurmstepd\.scope")
"""cgroup/v2: slurmd puts every step under ``system.slice/slurmstepd.scope`` (with several
slurmd per host, ``<nodename>_slurmstepd.scope``)."""
_V1_ROOT = re.compile(r"slurm(?:_[A-Za-z0-9._-]{1,64})?")
"""cgroup/v1: ``/slurm`` (``/slurm_<nodename>`` with several slurmd) at a hierarchy's root."""
_V1_UID = re.compile(r"uid_([0-9]{1,10})")
_STEPD_TITLE = re.compile(r"slurmstepd: \[([0-9]{1,20})\.[A-Za-z0-9_]{1,32}\]")
"""slurmstepd's process title (``/proc/<pid>/cmdline``): ``slurmstepd: [<job>.<step>]``,
the step a number, ``batch``, ``extern`` or ``interactive``."""
_USER_PARTS = re.compile(r"user\.slice|user-[0-9]+\.slice|user@[0-9]+\.service")
"""What systemd names the cgroups it delegates to a user."""

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
        if entry.startswith(_wanted()):
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


def slurm_job_of_cgroup(text: str, prefix: str = "") -> str | None:
    """The Slurm job id in a ``/proc/<pid>/cgroup`` (v1: ``4:memory:/slurm/uid_1000/
    job_42/step_0/task_0``, v2: ``0::/system.slice/slurmstepd.scope/job_42/step_0/...``),
    None unless the path is where slurmd itself puts a job (:func:`parse_cgroup`)."""
    cgroup = parse_cgroup(text, prefix)
    return cgroup.job if cgroup.refused is None else None


@dataclass(frozen=True, slots=True)
class Cgroup:
    """What a process's cgroup says about Slurm.

    Only a path where slurmd's own cgroup plugin puts a job is the scheduler's word: on v2
    ``<prefix>/system.slice/slurmstepd.scope/job_<id>``, on v1 ``<prefix>/slurm/uid_<uid>/
    job_<id>``, both created by root, which alone can move a process there. Anything else
    that names slurm (a user's ``slurm-x.scope``, a ``slurm/job_<id>`` made in a subtree
    systemd delegated to a user) is refused: ``refused`` says why."""

    slurm: bool
    """The process runs in slurmd's own tree (a job's, or the stepd's scope)."""
    job: str | None
    """The ``job_<id>`` in that tree: the scheduler's own word for the process's job."""
    uid: int | None = None
    """cgroup/v1's ``uid_<uid>``: believed only when it is the process's uid."""
    refused: str | None = None
    """Why a path naming slurm is not believed; None when none does or it is anchored."""
    dirs: tuple[tuple[str, str], ...] = ()
    """(v1 controllers or "" for v2, the job directory's path): its owner must be root
    where the cgroup file system shows it."""

    def refuse(self, why: str) -> Cgroup:
        """The same cgroup, believed for nothing."""
        return Cgroup(False, None, refused=why)


_NO_SLURM = Cgroup(False, None)


def _anchored(controllers: str, path: str, prefix: str) -> tuple[str | None, int | None, bool]:
    """(job, v1 uid, in slurmd's tree) of one cgroup line's path, anchored at the root
    (after the site's ``prefix``)."""
    if prefix:
        if not path.startswith(prefix + "/"):
            return None, None, False
        path = path[len(prefix):]
    parts = path.split("/")[1:]
    if controllers == "":  # cgroup v2's unified line
        if len(parts) >= 2 and parts[0] == "system.slice" and _STEPD_SCOPE.fullmatch(parts[1]):
            job = _JOB_DIR.fullmatch(parts[2]) if len(parts) > 2 else None
            return (job.group(1) if job else None), None, True
        return None, None, False
    if len(parts) >= 3 and _V1_ROOT.fullmatch(parts[0]):
        uid, job = _V1_UID.fullmatch(parts[1]), _JOB_DIR.fullmatch(parts[2])
        if uid and job:
            return job.group(1), int(uid.group(1)), True
    return None, None, False


def parse_cgroup(text: str, prefix: str = "") -> Cgroup:
    """The Slurm part of a ``/proc/<pid>/cgroup``, its paths anchored where slurmd's cgroup
    plugins create them (after the site's ``prefix``, e.g. the path a containerised slurmd
    lives under); any other path naming slurm is refused, with the reason."""
    if "slurm" not in text.lower():  # most processes: nothing to anchor or refuse
        return _NO_SLURM
    jobs: set[str] = set()
    uids: set[int] = set()
    dirs: list[tuple[str, str]] = []
    slurm = False
    refused: str | None = None
    for line in text.splitlines()[:64]:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        controllers, path = fields[1], fields[2]
        job, uid, inside = _anchored(controllers, path, prefix)
        if inside:
            slurm = True
            if job is not None:
                jobs.add(job)
                cut = path.split("/")
                depth = 4 + (len(prefix.split("/")) - 1 if prefix else 0)
                dirs.append((controllers, "/".join(cut[:depth])))
            if uid is not None:
                uids.add(uid)
        elif "slurm" in path.lower() and refused is None:
            parts = path.split("/")
            refused = (
                "a slurm-named cgroup in a subtree systemd delegates to a user"
                if any(_USER_PARTS.fullmatch(p) for p in parts)
                else "a slurm-named cgroup outside slurmd's own "
                "(system.slice/slurmstepd.scope/job_<id>, /slurm/uid_<uid>/job_<id>)"
            )
    if refused is not None and not slurm:
        return Cgroup(False, None, refused=refused)
    if len(jobs) > 1 or len(uids) > 1:
        return Cgroup(False, None, refused="its cgroups name different Slurm jobs or users")
    return Cgroup(slurm, next(iter(jobs), None), next(iter(uids), None), dirs=tuple(dirs))


def stepd_job(cmdline: bytes) -> str | None:
    """The job a slurmstepd works for, from its process title; None if it names none."""
    match = _STEPD_TITLE.match(cmdline.split(b"\0", 1)[0].decode("ascii", "replace"))
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class Stat:
    """The fields of ``/proc/<pid>/stat`` the process identity needs."""

    session: int
    start_ticks: int
    """Clock ticks after boot the process started: with the pid, unique on the node."""
    ppid: int = 0
    comm: str = ""
    """The command name (any process may set its own: evidence only with its uid)."""


def parse_stat(text: str) -> Stat | None:
    """Session and start time from ``/proc/<pid>/stat``; the command name (field 2) may hold
    spaces and parentheses, so fields are counted from its last ``)``."""
    head, paren, rest = text.rpartition(")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        return None
    try:
        return Stat(session=int(fields[3]), start_ticks=int(fields[19]), ppid=int(fields[1]),
                    comm=head.partition("(")[2])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Claim:
    """An environment claim checked against a stronger source: refused (the cgroup says
    otherwise, or the process runs outside Slurm) or believed unverified (no cgroup)."""

    reason: str
    """``job_claim_refused`` or ``job_claim_unverified``."""
    variable: str
    why: str


REFUSED = "job_claim_refused"
UNVERIFIED = "job_claim_unverified"
_PMIX_SLURM = re.compile(r"slurm\.pmix\.([0-9]{1,20})\.")


def slurm_claim(name: str, value: str) -> str | None:
    """The Slurm job an environment value names: ``SLURM_JOB_ID``, or Slurm's PMIx plugin's
    namespace ``slurm.pmix.<job>.<step>``; None for a variable that names none."""
    if name == SLURM_JOB:
        return value
    match = _PMIX_SLURM.match(value) if name == PMIX_NAMESPACE else None
    return match.group(1) if match else None


def from_process(
    variables: Mapping[str, bytes], cgroup: Cgroup | None, stepd: str | None = None
) -> tuple[JobIdentity | None, list[BadValue], list[Claim]]:
    """The strongest identity the cgroup or the environment names, the values dropped on
    the way and the claims judged (each is counted, none published).

    The scheduler's word wins: a Slurm cgroup's job is authoritative, and a variable naming
    a Slurm job is believed only where Slurm itself vouches for that same job: a process in
    that job's cgroup, or below a root slurmstepd whose title names that job (``stepd``:
    its job id), or where no cgroup could be read (``cgroup`` None: believed, counted
    unverified). A process that claims a Slurm job nothing vouches for is refused whole: no
    variable of its environment is believed, and its process session names its job."""
    values, bad = _values(variables)
    claims: list[Claim] = []
    found: list[JobIdentity] = []
    if cgroup is not None and cgroup.job is not None:
        found.append(SLURM.identity(cgroup.job))
    for name, value in list(values.items()):
        job = slurm_claim(name, value)
        if job is None:
            continue
        if cgroup is None:
            claims.append(Claim(UNVERIFIED, name, "no cgroup could be read"))
        elif cgroup.job is not None:
            if job != cgroup.job:
                claims.append(Claim(REFUSED, name, f"its Slurm cgroup is job {cgroup.job}"))
                del values[name]
        elif stepd is not None and job != stepd:
            claims.append(Claim(REFUSED, name, f"its slurmstepd works for job {stepd}"))
            return None, bad, claims
        elif stepd is None:
            claims.append(Claim(REFUSED, name, "outside any Slurm job cgroup or slurmstepd"))
            return None, bad, claims
    for name, value in values.items():
        found.append(environment()[name].identity(value))
    return strongest(found), bad, claims


def _values(variables: Mapping[str, bytes]) -> tuple[dict[str, str], list[BadValue]]:
    """The variables that pass :func:`checked`, torchrun's placeholder left out."""
    values: dict[str, str] = {}
    bad: list[BadValue] = []
    for name, raw in variables.items():
        try:
            value = checked(name, raw)
        except BadValue as exc:
            bad.append(exc)
            continue
        if name == TORCHELASTIC_RUN_ID and value == TORCHRUN_PLACEHOLDER:
            continue
        values[name] = value
    return values, bad


def session_identity(node: str, session: int, leader_start: int | None) -> JobIdentity:
    """A process session as a job: ``<node>/<session>-<leader start ticks>`` (the start time
    keeps a reused session id a new job), ``<node>/<session>`` when the leader is gone."""
    suffix = "" if leader_start is None else f"-{leader_start}"
    return PROCESS.identity(f"{node}/{session}{suffix}")
