#!/usr/bin/env python3
"""Build the container image and smoke-test it: the exporter runs from the image as the
image's (non-root) user on the simulated node, serves /readyz and /metrics on loopback, the
image's own health check passes, and the image stays within its size budget.

Standard library only (it runs before any virtualenv exists). Uses whatever
scripts/image.sh picks: buildah in CI (root, no Docker engine), else docker or podman.

    python3 .ci/image_smoke.py [--debian-base] [--image NAME] [--max-mb 150]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER = "65534:65534"
MAX_MB = 150.0
BUILDAH = ["buildah", "--storage-driver", os.environ.get("BUILDAH_STORAGE_DRIVER", "vfs")]
HEARTBEAT_S = 20.0
"""A step that printed nothing for this long says what it is on and for how long (CI's bar:
a line at least every 30 s; mmdebstrap and a buildah RUN step are silent for minutes)."""
STEP = re.compile(r"^((\[\d+/\d+\] )?STEP \d+/\d+: .*|image\.sh: .*|I: .*)$")
"""The lines that say where the build is: buildah's steps (``[stage/stages] STEP n/m: ...`` in a
multi-stage build), image.sh's own, mmdebstrap's phases."""


def sh(*cmd: str, **kw: object) -> str:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    return str(out.stdout).strip()


def say(text: str) -> None:
    print(f"image_smoke: {text}", file=sys.stderr, flush=True)


def build(cmd: list[str]) -> str:
    """Run scripts/image.sh, its log passed through line by line; while it is silent, every
    HEARTBEAT_S the step it is on (the last STEP line) and the time so far. Returns the
    image name (the last line of its stdout)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace")
    assert proc.stdout is not None and proc.stderr is not None
    stdout: list[str] = []
    reader = threading.Thread(target=lambda: stdout.extend(proc.stdout or ()), daemon=True)
    reader.start()
    lines: list[str | None] = []
    ready = threading.Condition()

    def pump() -> None:
        for line in proc.stderr or ():
            with ready:
                lines.append(line.rstrip("\n"))
                ready.notify()
        with ready:
            lines.append(None)
            ready.notify()

    threading.Thread(target=pump, daemon=True).start()
    step, since, said = "starting scripts/image.sh", started, started
    while True:
        with ready:
            ready.wait_for(lambda: bool(lines),
                           timeout=max(said + HEARTBEAT_S - time.monotonic(), 0.1))
            batch, lines[:] = list(lines), []
        now = time.monotonic()
        if not batch:
            said = now
            say(f"still on {step[:100]} ({now - since:.0f} s on it, {now - started:.0f} s "
                "building)")
            continue
        for line in batch:
            if line is None:
                break
            print(line, file=sys.stderr, flush=True)
            said = now
            if STEP.match(line):
                step, since = line, now
        if batch[-1] is None:
            break
    reader.join()
    if proc.wait() != 0:
        sys.exit(f"image_smoke: {' '.join(cmd)} failed with {proc.returncode}")
    return "".join(stdout).splitlines()[-1]


def pick_tool() -> str:
    if os.environ.get("IMAGE_TOOL"):
        return os.environ["IMAGE_TOOL"]
    if shutil.which("docker") and subprocess.run(
            ["docker", "info"], capture_output=True, check=False).returncode == 0:
        return "docker"
    for tool in ("podman", "buildah"):
        if shutil.which(tool):
            return tool
    sys.exit("image_smoke: needs docker (with a running engine), podman or buildah")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_ready(base: str, proc: subprocess.Popen[str] | None, deadline_s: float = 90) -> None:
    """Poll /readyz until 200: it turns ready after the first simulated poll."""
    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"image_smoke: the exporter exited with {proc.returncode}:\n"
                     f"{proc.stdout.read() if proc.stdout else ''}")
        try:
            status, body = get(base + "/readyz")
            if status == 200:
                return
            last = f"HTTP {status} {body[:200]}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    sys.exit(f"image_smoke: /readyz not 200 within {deadline_s}s: {last}")


def process_uid(port: int) -> int:
    """The uid of the exporter process serving ``port`` (chroot isolation: same PID space)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if any(b"gpu-goodput-exporter" in c for c in cmdline) and f"{port}".encode() in b" ".join(
                cmdline) and b"buildah" not in cmdline[0]:
            uid_line = next(x for x in status.splitlines() if x.startswith("Uid:"))
            return int(uid_line.split()[1])
    sys.exit(f"image_smoke: no exporter process for port {port}")


def simulated_gpus() -> int:
    """The simulated node's size as this checkout's config declares it (the image runs the
    same code), read without importing the package: this script runs on the bare host."""
    core = Path(__file__).resolve().parent.parent / "exporter" / "settings" / "core.py"
    text = core.read_text()
    match = re.search(r"^\s*simulate_gpus: int = Field\((\d+)", text, re.M)
    assert match, "exporter/settings/core.py: no simulate_gpus default"
    return int(match.group(1))


def check_metrics(base: str) -> int:
    status, text = get(base + "/metrics")
    assert status == 200, status
    series = [x for x in text.splitlines() if x.startswith("goodput_")]
    up = [x for x in series if x.startswith("goodput_gpu_up{")]
    # every GPU of the simulated node (the config default), each up
    assert len(up) == simulated_gpus() and all(float(x.rsplit(" ", 1)[1]) == 1.0 for x in up), up
    assert get(base + "/healthz")[0] == 200
    return len(series)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--debian-base", action="store_true",
                    help="build on Debian bases made with mmdebstrap (no registry needed)")
    ap.add_argument("--image", help="test this image instead of building one")
    ap.add_argument("--max-mb", type=float, default=MAX_MB)
    args = ap.parse_args()
    tool = pick_tool()
    os.environ["IMAGE_TOOL"] = tool

    started = time.monotonic()
    image = args.image
    if image is None:
        cmd = [str(ROOT / "scripts" / "image.sh")] + (["--debian-base"] if args.debian_base else [])
        say(f"building the image with {tool} ({' '.join(cmd[1:]) or 'standard'}; minutes "
            "on a fresh machine, a line at least every 20 s)")
        image = build(cmd)
    built_s = time.monotonic() - started
    say(f"built {image} in {built_s:.0f} s; running it")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    listen = f"127.0.0.1:{port}"

    if tool == "buildah":
        info = json.loads(sh(*BUILDAH, "inspect", "--type", "image", image))
        config = info["Docker"]["config"]
        ctr = sh(*BUILDAH, "from", "--pull-never", image)
        try:
            mount = sh(*BUILDAH, "mount", ctr)
            size = int(sh("du", "-sb", "--one-file-system", mount).split()[0])
            sh(*BUILDAH, "umount", ctr)
            # chroot isolation shares the host's network: the exporter binds host loopback.
            proc = subprocess.Popen(
                [*BUILDAH, "run", "--isolation", "chroot", ctr, "--",
                 *config["Entrypoint"], "--simulate", "--listen", listen],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                wait_ready(base, proc)
                uid = process_uid(port)
                series = check_metrics(base)
                # The image's own HEALTHCHECK command, run inside the image.
                health = config["Healthcheck"]["Test"]
                assert health[0] == "CMD", health
                sh(*BUILDAH, "run", "--isolation", "chroot", ctr, "--", *health[1:],
                   f"{base}/healthz")
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        finally:
            subprocess.run([*BUILDAH, "rm", ctr], capture_output=True, check=False)
    else:
        info = json.loads(sh(tool, "image", "inspect", image))[0]
        config = info["Config"]
        size = int(info["Size"])
        ctr = sh(tool, "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:9433", image, "--simulate")
        try:
            wait_ready(base, None)
            uid = int(sh(tool, "exec", ctr, "python", "-c", "import os; print(os.getuid())"))
            series = check_metrics(base)
            sh(tool, "exec", ctr, *config["Healthcheck"]["Test"][1:])
        finally:
            subprocess.run([tool, "stop", ctr], capture_output=True, check=False)

    labels = config.get("Labels") or {}
    problems = []
    if config.get("User") != USER:
        problems.append(f"image user {config.get('User')!r}, expected {USER!r}")
    if uid != int(USER.split(":")[0]):
        problems.append(f"the exporter ran as uid {uid}")
    if not config.get("Healthcheck"):
        problems.append("no HEALTHCHECK (built in OCI format?)")
    source = labels.get("org.opencontainers.image.source", "")
    if source and not source.startswith("https://"):
        problems.append(f"source label {source!r}")
    if "github.com/gpu-goodput-exporter" in json.dumps(labels):
        problems.append("a label names a repository that does not exist")
    mb = size / 1e6
    if mb > args.max_mb:
        problems.append(f"image is {mb:.1f} MB, budget {args.max_mb} MB")
    print(f"image_smoke: {image} via {tool}: {mb:.1f} MB, uid {uid}, {series} goodput_ series, "
          f"built in {built_s:.0f}s, labels {labels}")
    for p in problems:
        print(f"image_smoke: FAIL {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
