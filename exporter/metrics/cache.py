"""Encoded expositions, made right after each publish so scrapes only serve bytes.

The store tells :class:`ExpositionCache` of every new snapshot; a worker thread encodes the
latest one (bursts of publishes coalesce into one encode) in every variant a scraper asked
for recently: text or OpenMetrics, plain or gzip. Prometheus asks for one variant, so only
that one is kept warm; the text format always is. A scrape of a variant nobody asked for
before is encoded once on a worker thread, never on the event loop.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from exporter.metrics.encode import Encoder
from exporter.snapshot import Snapshot

log = structlog.get_logger("exposition")

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
WARM_SECONDS = 600.0
"""A variant is kept encoded for this long after it was last asked for."""
GZIP_LEVEL = 6
SETTLE_SECONDS = 0.1
"""After a publish, wait this long for the others of the same poll round (NVML, GPM, XID
and the model publish within milliseconds of each other) so they cost one encode, not five.
Until then a scrape gets the previous round's bytes: at most this much older."""


@dataclass(frozen=True)
class Variant:
    openmetrics: bool = False
    gzipped: bool = False

    @property
    def content_type(self) -> str:
        return OPENMETRICS if self.openmetrics else TEXT


def negotiate(accept: str | None, accept_encoding: str | None) -> Variant:
    """The variant a request asks for (OpenMetrics only when the Accept header names it)."""
    openmetrics = "application/openmetrics-text" in (accept or "")
    return Variant(openmetrics, _accepts_gzip(accept_encoding or ""))


def _accepts_gzip(header: str) -> bool:
    """Whether ``Accept-Encoding`` names gzip with a q-value above 0 (RFC 9110 12.5.3:
    ``gzip;q=0``, ``gzip; Q=0.000`` refuse it; a q-value that is not a number refuses the
    entry). ``*`` alone keeps the plain body, as before."""
    weights: dict[str, float] = {}
    for part in header.split(","):
        coding, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            name, _, raw = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(raw.strip())
                except ValueError:
                    q = 0.0
        if coding:
            weights[coding.lower()] = q
    return weights.get("gzip", 0.0) > 0


class ExpositionCache:
    def __init__(
        self,
        encoder: Encoder,
        snapshot: Callable[[], Snapshot],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._encoder = encoder
        self._snapshot = snapshot
        self._clock = clock
        self._lock = threading.Lock()  # one encode at a time: the encoder's caches
        self._wanted: dict[Variant, float] = {Variant(): float("inf")}
        self._bodies: dict[Variant, tuple[int, bytes]] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observers: list[Callable[[float, bytes], None]] = []
        self.encodes = 0

    # lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="exposition", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def published(self, _snapshot: Snapshot) -> None:
        """Store listener: a new snapshot exists (called on the publisher's thread)."""
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait()
            if self._stop.wait(SETTLE_SECONDS):  # let the round's other publishes land
                return
            self._dirty.clear()
            try:
                self.refresh()
            except Exception as exc:  # a bad reading must not kill the encoder for good
                log.error("exposition_encode_failed", error=f"{type(exc).__name__}: {exc}")

    def observe(self, observer: Callable[[float, bytes], None]) -> None:
        """Call ``observer(now, text body)`` after each publish's encode, on the encoder's
        thread (the landing page keeps a few for its rates); it must be quick."""
        self._observers.append(observer)

    # encoding ---------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Encode the current snapshot in every variant asked for recently."""
        now = self._clock()
        wanted = [v for v, at in list(self._wanted.items()) if now - at <= WARM_SECONDS]
        for variant in wanted:
            self.body(variant)
        for observer in self._observers:
            observer(now, self.body(Variant()))

    def body(self, variant: Variant) -> bytes:
        """The variant's bytes for the current snapshot, encoding them if needed."""
        snap = self._snapshot()
        hit = self._bodies.get(variant)
        if hit is not None and hit[0] == snap.version:
            return hit[1]
        with self._lock:
            hit = self._bodies.get(variant)
            if hit is not None and hit[0] == snap.version:
                return hit[1]
            plain = self._plain(snap, variant.openmetrics)
            data = gzip.compress(plain, GZIP_LEVEL, mtime=0) if variant.gzipped else plain
            self._bodies[variant] = (snap.version, data)
            return data

    def _plain(self, snap: Snapshot, openmetrics: bool) -> bytes:
        plain_variant = Variant(openmetrics, False)
        hit = self._bodies.get(plain_variant)
        if hit is not None and hit[0] == snap.version:
            return hit[1]
        data = self._encoder.encode(snap, openmetrics)
        self.encodes += 1
        self._bodies[plain_variant] = (snap.version, data)
        return data

    def cached(self, variant: Variant) -> bytes | None:
        """The newest bytes of a variant, without encoding (None if never encoded); notes
        that the variant is wanted so the next publish encodes it."""
        if self._wanted.get(variant, 0.0) != float("inf"):
            self._wanted[variant] = self._clock()
        hit = self._bodies.get(variant)
        if hit is None:
            return None
        if hit[0] != self._snapshot().version and not self._dirty.is_set():
            return None  # not a round in progress: this variant is simply not encoded yet
        return hit[1]
