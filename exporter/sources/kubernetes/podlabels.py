"""Pod-label source: the job each pod on this node belongs to, from its labels.

The pod-resources API names pods but carries none of their labels, so with
``kubernetes.pod_labels`` on this source lists the pods of this node from the API server
(``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``, service-account token and CA) every
``pod_labels_interval`` and names each pod's job by the first of ``kubernetes.job_labels`` it
carries. The snapshot joins the names into the kubelet's assignments, so ``job_name`` on
``goodput_gpu_pod_info`` and the model's jobs (pods of one job judged together) use them.

A failed list keeps the last names (a pod's job label does not change while it runs) and
shows as ``goodput_attribution_available{source="pod_labels"}`` = 0 with a reason; the
scheduler logs it once per reason. Everything else works without it.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
from collections.abc import Mapping, Sequence
from urllib.parse import quote

import aiohttp

from exporter import urls
from exporter.readings import Availability, PodJobs
from exporter.snapshot import SourceResult
from exporter.sources.base import Source
from exporter.sources.kubernetes.config import KubernetesConfig

SOURCE = "pod_labels"
MAX_BYTES = 32 * 1024 * 1024
"""A node's pod list is well under this (110 pods by default); more is not an API server."""


class PodLabelError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def job_names(body: object, job_labels: Sequence[str]) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> job name from a ``PodList``; pods without a job label are left
    out. Raises ValueError when the body is not a pod list."""
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        raise ValueError("not a PodList: no items")
    found: dict[tuple[str, str], str] = {}
    for item in body["items"]:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            raise ValueError("pod without metadata")
        namespace, name = meta.get("namespace"), meta.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            raise ValueError("pod without namespace or name")
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError(f"labels of {namespace}/{name} are not a map")
        job = _first_label(labels, job_labels)
        if job:
            found[(namespace, name)] = job
    return found


def pod_ips(body: object) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> its IP, for the pods of a ``PodList`` (already checked by
    :func:`job_names`) whose ``status.podIP`` is an IP address; the rest are left out."""
    found: dict[tuple[str, str], str] = {}
    items = body.get("items") if isinstance(body, dict) else None
    for item in items if isinstance(items, list) else ():
        meta = item.get("metadata") if isinstance(item, dict) else None
        status = item.get("status") if isinstance(item, dict) else None
        ip = status.get("podIP") if isinstance(status, dict) else None
        if not isinstance(meta, dict) or not isinstance(ip, str):
            continue
        try:
            address = str(ipaddress.ip_address(ip))
        except ValueError:
            continue
        found[(str(meta.get("namespace")), str(meta.get("name")))] = address
    return found


def _first_label(labels: Mapping[str, object], names: Sequence[str]) -> str:
    for name in names:
        value = labels.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


async def read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The whole body, up to ``cap`` bytes (``read(n)`` returns only what is buffered, so
    a list over ~128 KB would arrive cut); a longer body is a PodLabelError."""
    declared = resp.content_length
    if declared is not None and declared > cap:
        raise PodLabelError("invalid", f"pod list of {declared} bytes is over {cap} bytes")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > cap:
            raise PodLabelError("invalid", f"pod list larger than {cap} bytes")
    return bytes(body)


class PodLabelSource(Source):
    name = SOURCE

    def __init__(self, config: KubernetesConfig, node_name: str) -> None:
        self.interval = config.pod_labels_interval
        self._config = config
        self._node = node_name
        self._session: aiohttp.ClientSession | None = None
        self._jobs: PodJobs | None = None

    def _base_url(self) -> str:
        if self._config.api_server:
            return self._config.api_server.rstrip("/")
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise PodLabelError("unavailable", "KUBERNETES_SERVICE_HOST is not set")
        if len(host) > urls.MAX_HOST_CHARS or not (port.isascii() and port.isdigit()
                                                   and len(port) <= 5):
            # Input like any other: never a 100 KB URL in a log line.
            raise PodLabelError(
                "unavailable", "KUBERNETES_SERVICE_HOST or _PORT is not a host name and port"
            )
        if ":" in host:  # IPv6 service address
            host = f"[{host}]"
        return f"https://{host}:{port}"

    def _token(self) -> str:
        try:
            with open(self._config.token_path) as f:  # re-read: bound tokens rotate
                return f.read().strip()
        except OSError as exc:
            raise PodLabelError(
                "no_token", f"service-account token {self._config.token_path}: {exc.strerror}"
            ) from exc

    def _ssl(self, url: str) -> ssl.SSLContext | bool:
        if not url.startswith("https:"):
            return False
        try:
            return ssl.create_default_context(cafile=self._config.ca_path)
        except (OSError, ssl.SSLError) as exc:
            raise PodLabelError("no_token", f"CA {self._config.ca_path}: {exc}") from exc

    async def _list(self) -> bytes:
        base = self._base_url()
        token = self._token()
        url = f"{base}/api/v1/pods?fieldSelector={quote('spec.nodeName=' + self._node)}"
        if self._session is None:
            self._session = aiohttp.ClientSession()
        timeout = aiohttp.ClientTimeout(total=self._config.pod_labels_timeout)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        try:
            async with self._session.get(
                url, headers=headers, timeout=timeout, ssl=self._ssl(url)
            ) as resp:
                if resp.status in (401, 403):
                    raise PodLabelError(
                        "forbidden", f"HTTP {resp.status}: the service account needs list pods"
                    )
                if resp.status != 200:
                    raise PodLabelError(
                        "unavailable", f"HTTP {resp.status} from {urls.redact(base)}"
                    )
                return await read_capped(resp, MAX_BYTES)
        except TimeoutError as exc:
            raise PodLabelError(
                "timeout", f"no pod list in {self._config.pod_labels_timeout} s"
            ) from exc
        except aiohttp.ClientError as exc:
            message = urls.scrub(f"{type(exc).__name__}: {exc}", base)
            raise PodLabelError("unavailable", message) from exc

    async def poll(self) -> SourceResult:
        try:
            body = await self._list()
            try:
                pods = json.loads(body)
                jobs = job_names(pods, self._config.job_labels)
            except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
                raise PodLabelError("invalid", f"not a pod list: {exc}") from exc
        except PodLabelError as exc:
            return SourceResult(
                source=SOURCE,
                ok=False,
                reason=exc.reason,
                error=str(exc),
                reading=self._jobs,
                availability=(Availability(SOURCE, exc.reason),),
            )
        self._jobs = PodJobs(jobs, pod_ips(pods))
        return SourceResult(source=SOURCE, reading=self._jobs, availability=(Availability(SOURCE),))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
