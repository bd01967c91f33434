"""Scrape targets: from the config file, from ``--serving-target`` and from discovery."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from exporter.config import ServingConfig
from exporter.sources.serving.auth import Access

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "0.0.0.0"})


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
        host = parts.netloc.rsplit("@", 1)[-1]
        return f"{parts.scheme}://{host}{parts.path}"

    @property
    def is_local(self) -> bool:
        """Whether the engine listens on this host, so /proc can find its process."""
        return (urlsplit(self.url).hostname or "") in LOOPBACK_HOSTS


def static_targets(config: ServingConfig) -> list[Target]:
    """Targets of the config file, then ``--serving-target`` URLs not already listed."""
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
    known = {t.url for t in out}
    for url in config.extra_targets:
        if url not in known:
            out.append(Target(url=url, origin="flag"))
            known.add(url)
    return out


class TargetSet:
    """Static targets plus whatever discovery publishes; read once per scrape cycle.

    Discovery runs on its own thread and replaces its whole list at once, so the scraper
    reads a consistent set without waiting on it.
    """

    def __init__(self, static: Iterable[Target] = ()) -> None:
        self._static = tuple(static)
        self._discovered: tuple[Target, ...] = ()
        self._lock = threading.Lock()

    def set_discovered(self, targets: Iterable[Target]) -> None:
        with self._lock:
            self._discovered = tuple(targets)

    def __call__(self) -> list[Target]:
        with self._lock:
            discovered = self._discovered
        static_urls = {t.url for t in self._static}
        return [*self._static, *(t for t in discovered if t.url not in static_urls)]


TargetProvider = Callable[[], list[Target]]
