"""Scrape targets: from the config file, from ``--serving-target`` and from discovery."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlsplit

import structlog

from exporter import urls
from exporter.sources.serving import aliases
from exporter.sources.serving.auth import Access
from exporter.sources.serving.config import ServingConfig
from exporter.util import OnChange

log = structlog.get_logger("serving")

DROPPED_REASONS = ("bad_pod", "duplicate", "max_targets", "max_targets_per_namespace")
"""Why discovered targets are not scraped (``goodput_serving_targets_dropped``)."""


@dataclass(frozen=True)
class Target:
    """One engine endpoint, keyed by ``url``. ``gpus`` (indexes or UUIDs) pins attribution;
    ``namespace`` and ``pod`` are set for discovered targets; ``pid`` is the engine's
    process when known."""

    url: str
    gpus: tuple[str, ...] = ()
    engine: str = ""
    model: str = ""
    namespace: str = ""
    pod: str = ""
    pid: int | None = None
    origin: str = "config"
    invalid: str = ""
    """Why this target cannot be scraped (a bad pod annotation); never fetched then."""
    invalid_reason: str = "bad_annotation"
    """The reason code published while ``invalid`` is set (bad_annotation, bad_url)."""
    access: Access | None = field(default=None, compare=False, repr=False)
    """Credentials and TLS settings (config targets only); keeps its files' cache, so the
    same object must live across polls."""

    @property
    def port(self) -> int | None:
        parts = urlsplit(self.url)
        try:
            return parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return None

    @property
    def name(self) -> str:
        """The ``target`` label: ``namespace/pod:port`` for a discovered pod (pod IPs churn
        and say nothing), else the URL without credentials, query or fragment."""
        parts = urlsplit(self.url)
        if self.pod:
            try:
                port = str(parts.port or "")
            except ValueError:  # a bad port annotation: the name still says which pod
                port = ""
            return f"{self.namespace}/{self.pod}:{port}"
        return urls.label(self.key)

    @cached_property
    def key(self) -> str:
        """The identity of the endpoint: its redacted ``target`` label form (the normalised
        URL without userinfo, query values as ``<secret>``; the URL itself when it is
        malformed). Two targets that would publish one label are one target, so no label
        is fed twice (docs/security.md)."""
        try:
            return urls.label(urls.normalise(self.url))
        except urls.BadUrl:
            return self.url

    @property
    def is_local(self) -> bool:
        """Whether the engine listens on this host, so /proc can find its process."""
        return aliases.canonical(urlsplit(self.url).hostname or "") == aliases.LOOPBACK


def static_targets(config: ServingConfig) -> list[Target]:
    """Targets of the config file, then ``--serving-target`` URLs; spellings of one
    endpoint are merged into the first with a warning (never scraped or counted twice)."""
    out = [
        Target(
            url=t.url,
            gpus=tuple(t.gpus),
            engine=t.engine,
            model=t.model,
            pid=t.pid,
            origin="config",
            access=(
                Access(t.authorization, t.basic_auth, t.tls_config)
                if t.authorization or t.basic_auth or t.tls_config
                else None
            ),
        )
        for t in config.targets
    ]
    out += [Target(url=url, origin="flag") for url in config.extra_targets]
    return merge_duplicates(out)


def merge_duplicates(
    targets: Iterable[Target], look_up: aliases.Resolve = aliases.resolve
) -> list[Target]:
    """The first target of each key and of each address (loopback aliases, host names
    that resolve alike: exporter/sources/serving/aliases.py); every later spelling is
    logged once and left out."""
    targets = list(targets)
    reached = aliases.addresses([t.url for t in targets], look_up)
    seen: dict[str, Target] = {}
    by_address: dict[str, Target] = {}
    for target in targets:
        first = seen.get(target.key)
        found = reached.get(target.url, frozenset())
        if first is None:
            first = next((by_address[a] for a in sorted(found) if a in by_address), None)
        if first is None:
            seen[target.key] = target
            by_address.update(dict.fromkeys(found, target))
        elif target.origin == "config" or first.url != target.url:
            log.warning(
                "serving_target_duplicate",
                target=target.name,
                same_as=first.name,
                effect="merged: scraped and counted once",
            )
    return list(seen.values())


class TargetSet:
    """Static targets plus whatever discovery publishes; read once per scrape cycle.

    Discovery runs on its own thread and replaces its whole list at once, so the scraper
    reads a consistent set without waiting on it. Discovered targets that duplicate another
    (after normalisation), pass ``per_namespace`` in their namespace or ``max_targets`` in
    all are left out and counted in :attr:`dropped`; the places left under ``max_targets``
    go to the namespaces in turn (one pod each, round after round), so no tenant's pods
    take them all, and the turn rotates from read to read: the first namespace left out
    is the first served next time, so no name order keeps a tenant out (the targets
    waiting their turn are :attr:`resting`). Static targets are never over the cap
    (config validation).
    """

    def __init__(
        self, static: Iterable[Target] = (), max_targets: int = 64, per_namespace: int = 16
    ) -> None:
        self._static = tuple(static)
        self._discovered: tuple[Target, ...] = ()
        self._lock = threading.Lock()
        self._max = max_targets
        self._per_namespace = per_namespace
        self._log = OnChange(log)
        self._rejected = 0
        self.dropped: Counter[str] = Counter(dict.fromkeys(DROPPED_REASONS, 0))
        """Targets left out of the last read, by reason (a gauge, not a total)."""
        self._turn = ""
        """The namespace whose turn is first at the next read (the places rotate)."""
        self.resting: tuple[Target, ...] = ()
        """Discovered targets left out of the last read under max_targets only: their
        turn comes, so the source keeps what it knows of them (at most max_targets)."""

    def set_discovered(self, targets: Iterable[Target]) -> None:
        with self._lock:
            self._discovered = tuple(targets)

    def set_rejected(self, pods: int) -> None:
        """How many pods discovery left out because they could not be read."""
        self._rejected = pods

    def replace_static(
        self, static: Iterable[Target], max_targets: int, per_namespace: int = 16
    ) -> None:
        """A reloaded config's targets and caps (SIGHUP)."""
        with self._lock:
            self._static = tuple(static)
            self._max = max_targets
            self._per_namespace = per_namespace

    def __call__(self) -> list[Target]:
        with self._lock:
            static, discovered, cap = self._static, self._discovered, self._max
            per_namespace = self._per_namespace
        keys = {t.key for t in static}
        out = list(static)
        dropped: Counter[str] = Counter(dict.fromkeys(DROPPED_REASONS, 0))
        dropped["bad_pod"] = self._rejected
        queues: dict[str, list[Target]] = {}
        for target in discovered:
            if target.key in keys:
                dropped["duplicate"] += 1
                continue
            keys.add(target.key)
            queue = queues.setdefault(target.namespace, [])
            if len(queue) >= per_namespace:
                dropped["max_targets_per_namespace"] += 1
            else:
                queue.append(target)
        taken, self._turn = _in_turn(queues, cap - len(out), self._turn)
        chosen = {t.key for t in taken}
        resting = [t for q in queues.values() for t in q if t.key not in chosen]
        dropped["max_targets"] += len(resting)
        self.resting = tuple(resting[: max(cap, 0)])
        out += taken
        self._log(
            "over_cap",
            dropped["max_targets"] + dropped["max_targets_per_namespace"],
            0,
            event="serving_targets_over_cap",
            level="warning",
            max_targets=cap,
            max_targets_per_namespace=per_namespace,
            effect="discovered targets past a cap are not scraped",
        )
        self.dropped = dropped
        return out


def _in_turn(
    queues: dict[str, list[Target]], room: int, first: str = ""
) -> tuple[list[Target], str]:
    """Up to ``room`` targets, one of each namespace in turn, starting at namespace
    ``first`` (in name order, wrapping round); returns them and the namespace to start at
    next time: the first one this read had no place for. So the places rotate, and no
    name order keeps a tenant out for more than a few reads."""
    names = sorted(queues)
    start = next((i for i, name in enumerate(names) if name >= first), 0)
    order = names[start:] + names[:start]
    taken: list[Target] = []
    depth = 0
    while any(len(q) > depth for q in queues.values()):
        for name in order:
            if len(queues[name]) <= depth:
                continue
            if len(taken) >= room:
                return taken, name
            taken.append(queues[name][depth])
        depth += 1
    return taken, ""


TargetProvider = Callable[[], list[Target]]
