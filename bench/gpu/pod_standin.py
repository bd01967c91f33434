"""A kubelet pod-resources stand-in for bench runs on a machine without a kubelet.

The daemon judges the GPUs of one job together (comm_wait, ``goodput_job_straggler``) only
when the kubelet says which GPUs one pod holds. A lent GPU machine has no kubelet, so
``bench/gpu/diagnosis.py`` serves one here: the test suite's stand-in
(``testkit/kubelet.py``, the real gRPC service) on a unix socket in a temp
dir, run by its own asyncio loop in a background thread, listing the pods it is given.

Needs grpcio and protobuf (carried as wheels in ``.whl/`` to the GPU machine).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

GPU_RESOURCE = "nvidia.com/gpu"

# (namespace, pod, container) -> device ids (GPU UUIDs) of GPU_RESOURCE
Pods = Mapping[tuple[str, str, str], Sequence[str]]


class PodResourcesStandIn:
    """Serve ``pods`` on ``<tempdir>/kubelet.sock`` until :meth:`stop`."""

    def __init__(self, pods: Pods, timeout: float = 10.0) -> None:
        # Imported here: a machine without grpcio fails this call (the caller says why and
        # runs without pods), not the import of bench/gpu/diagnosis.py.
        from testkit.kubelet import pod, serve

        self._dir = tempfile.mkdtemp(prefix="goodput-kubelet-")  # unix paths: 107 bytes max
        self.socket = str(Path(self._dir) / "kubelet.sock")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="kubelet-standin")
        self._thread.start()
        try:
            future = asyncio.run_coroutine_threadsafe(serve(self.socket), self._loop)
            self._server, self.servicer = future.result(timeout)
        except BaseException:
            self._close_loop()
            raise
        self.servicer.pods = [
            pod(namespace, name, {container: [(GPU_RESOURCE, list(ids))]})
            for (namespace, name, container), ids in pods.items()
        ]
        self.pods = {f"{ns}/{name}/{c}": list(ids) for (ns, name, c), ids in pods.items()}

    @property
    def list_calls(self) -> int:
        """How often the daemon asked (0: it never read the pods)."""
        return int(self.servicer.list_calls)

    def describe(self) -> dict[str, Any]:
        return {"socket": self.socket, "pods": self.pods, "list_calls": self.list_calls}

    def stop(self) -> None:
        with_timeout = asyncio.run_coroutine_threadsafe(self._server.stop(0), self._loop)
        try:
            with_timeout.result(10)
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()
        shutil.rmtree(self._dir, ignore_errors=True)
