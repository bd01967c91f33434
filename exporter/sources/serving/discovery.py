"""Discovering serving targets among the pods of this node through a Kubernetes watch.

A pod is scraped when it carries ``<prefix>scrape: "true"`` (prefix
``serving.goodput.dev/`` by default) and optionally:

- ``<prefix>port``: the metrics port (default: the pod's first declared container port);
- ``<prefix>path``: the path (default ``/metrics``, ``/prometheus/metrics`` for trtllm-serve);
- ``<prefix>scheme``: ``http`` (default) or ``https``;
- ``<prefix>engine``, ``<prefix>model``, ``<prefix>gpus`` (comma separated): as in config.

One list, then one long watch (field selector ``spec.nodeName=<node>``), on a thread of its
own because the official client blocks; the watch is re-established with a fresh list when
it ends or fails. Each pod is judged on its own: a pod whose annotations are bad becomes a
target that is never fetched and reports ``bad_annotation``; a pod that cannot be read at
all is left out and counted (``goodput_serving_targets_dropped{reason="bad_pod"}``), and
never stops the list or the watch for the other pods. A pod being deleted (deletion
timestamp set) or no longer running is dropped at once.

Annotations are written by whoever may edit the pod, so they only ever narrow what the
kubelet says: ``gpus`` can pick among the GPUs the kubelet assigned to the pod, never add
others (``attribution.resolve``; docs/security.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from exporter import urls
from exporter.sources.serving.engines import ENGINE_NAMES, default_path
from exporter.sources.serving.targets import Target

log = structlog.get_logger("serving.discovery")

TRUE = frozenset({"true", "1", "yes"})
WATCH_SECONDS = 300
MAX_ANNOTATION_CHARS = 1024
"""Longest annotation value read; a longer one is a bad annotation."""
MAX_GPUS = 64
"""Most entries of a ``gpus`` annotation."""


def pod_target(pod: Any, node_name: str, prefix: str) -> Target | None:
    """The target a pod asks for, ``None`` if it asks for none or is not running here."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    notes: Mapping[str, str] = (meta.annotations if meta else None) or {}
    if notes.get(prefix + "scrape", "").strip().lower() not in TRUE:
        return None
    if spec is None or spec.node_name != node_name:
        return None
    if status is None or status.phase != "Running" or not status.pod_ip:
        return None
    if getattr(meta, "deletion_timestamp", None) is not None:
        return None  # terminating: its engine is going away
    too_long = sorted(
        k for k, v in notes.items()
        if k.startswith(prefix) and len(str(v)) > MAX_ANNOTATION_CHARS
    )
    if too_long:
        return _refused(meta, status, f"{too_long[0]} is longer than {MAX_ANNOTATION_CHARS}")
    scheme = notes.get(prefix + "scheme", "http")
    engine = notes.get(prefix + "engine", "")
    path = notes.get(prefix + "path") or default_path(engine)
    port_text = notes.get(prefix + "port") or _first_port(spec)
    host = f"[{status.pod_ip}]" if ":" in status.pod_ip else status.pod_ip
    url = f"{scheme}://{host}:{port_text}{path if path.startswith('/') else '/' + path}"
    problem = ""
    if not port_text:
        problem = f"no {prefix}port annotation and no container port"
    elif not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        problem = f"{prefix}port {port_text!r} is not a port number"
    elif scheme not in ("http", "https"):
        problem = f"{prefix}scheme {scheme!r} is not http or https"
    elif engine and engine not in ENGINE_NAMES:
        problem = f"{prefix}engine {engine[:64]!r} is not a known engine"
    reason = "bad_annotation"
    if not problem:
        try:
            urls.normalise(url)
        except urls.BadUrl as exc:
            problem, reason = str(exc), "bad_url"
    gpus = tuple(g.strip() for g in notes.get(prefix + "gpus", "").split(",") if g.strip())
    if len(gpus) > MAX_GPUS and not problem:
        problem = f"{prefix}gpus lists more than {MAX_GPUS} GPUs"
    return Target(
        url=url,
        gpus=gpus,
        engine=engine,
        model=notes.get(prefix + "model", ""),
        namespace=meta.namespace or "",
        pod=meta.name or "",
        origin="kubernetes",
        invalid=problem,
        invalid_reason=reason,
    )


def _refused(meta: Any, status: Any, problem: str) -> Target:
    """An unscrapable target for a pod whose annotations cannot be used."""
    host = f"[{status.pod_ip}]" if ":" in status.pod_ip else status.pod_ip
    return Target(
        url=f"http://{host}/",
        namespace=meta.namespace or "",
        pod=meta.name or "",
        origin="kubernetes",
        invalid=problem,
    )


def _first_port(spec: Any) -> str:
    for container in spec.containers or []:
        for port in container.ports or []:
            if port.container_port:
                return str(port.container_port)
    return ""


class PodWatcher:
    """Keeps the serving targets of this node's pods current; calls ``publish`` with the
    full list after every change. ``state`` is ("ok", "") or ("down", reason)."""

    def __init__(
        self,
        api: Any,
        node_name: str,
        prefix: str,
        publish: Callable[[list[Target]], None],
        retry_seconds: float = 5.0,
        on_rejected: Callable[[int], None] | None = None,
    ) -> None:
        self._api = api
        self._on_rejected = on_rejected
        self._node = node_name
        self._prefix = prefix
        self._publish = publish
        self._retry = retry_seconds
        self._stop = threading.Event()
        self._watch: Any = None
        self._thread: threading.Thread | None = None
        self._pods: dict[str, Target] = {}
        self.rejected: dict[str, str] = {}
        """Pods left out because they could not be read (pod key -> error)."""
        self.state: tuple[str, str] = ("down", "starting")

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="serving-discovery", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        from kubernetes import watch

        selector = f"spec.nodeName={self._node}"
        while not self._stop.is_set():
            try:
                listed = self._api.list_pod_for_all_namespaces(field_selector=selector)
                self._pods = {}
                self.rejected = {}
                for pod in listed.items:
                    self._apply("ADDED", pod)
                self._changed()
                self._set_state(("ok", ""))
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(
                    self._api.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=listed.metadata.resource_version,
                    timeout_seconds=WATCH_SECONDS,
                ):
                    if self._stop.is_set():
                        return
                    if event["type"] == "ERROR":  # 410 Gone and friends: list again
                        break
                    self._apply(event["type"], event["object"])
                    self._changed()
            except Exception as exc:  # API down, RBAC, bad config: retry, keep last targets
                if self._stop.is_set():
                    return
                self._set_state(("down", _reason(exc)), error=f"{type(exc).__name__}: {exc}")
                self._stop.wait(self._retry)

    def _apply(self, kind: str, pod: Any) -> None:
        """One pod's event; whatever is wrong with this pod costs this pod only."""
        try:
            key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        except AttributeError:
            return  # not a pod at all: nothing to key it by
        self.rejected.pop(key, None)
        try:
            target = None if kind == "DELETED" else pod_target(pod, self._node, self._prefix)
        except Exception as exc:
            self._pods.pop(key, None)
            self.rejected[key] = f"{type(exc).__name__}: {exc}"[:200]
            log.warning("serving_pod_unreadable", pod=key, error=self.rejected[key],
                        effect="this pod is not scraped; other pods are")
            return
        if target is None:
            self._pods.pop(key, None)
        else:
            if target.invalid and self._pods.get(key) != target:
                log.warning("serving_pod_annotation_invalid", pod=key, error=target.invalid)
            self._pods[key] = target

    def _changed(self) -> None:
        self._publish(sorted(self._pods.values(), key=lambda t: t.url))
        if self._on_rejected is not None:
            self._on_rejected(len(self.rejected))

    def _set_state(self, state: tuple[str, str], error: str = "") -> None:
        if state != self.state:
            if state[0] == "ok":
                log.info("serving_discovery_ok", node=self._node)
            else:
                log.error("serving_discovery_failed", reason=state[1], error=error)
            self.state = state


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status:
        return f"http_{status}"
    return "api_error"
