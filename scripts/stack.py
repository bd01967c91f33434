#!/usr/bin/env python3
"""The local stack: the exporter on the simulated node, a real Prometheus loaded with our
rules, a real Alertmanager routed to a local webhook receiver. Everything on loopback.

    make stack                      # demo: runs until Ctrl-C
    python scripts/stack.py --test  # CI: exits 0 once GPUBusyButUnproductive reached the webhook

The rules are the repository's, with three changes so the demo shows alerts in minutes:
every `for:` is capped (1m in the demo, 10s with --test); every range window (`[5m]`, `[15m]`)
becomes 1m (20s with --test), because rate() over a window longer than the series' life
underestimates (a 30 s old counter at full speed reads 0.1 over 5m); and the recording rules
are evaluated at the stack's evaluation interval instead of every minute. The recording
rules keep their names (`..._rate5m`) although their window is shorter here.
alerts/alertmanager.example.yml is used with every receiver pointed at the local webhook
and shorter group waits. The webhook
appends each notification it receives, one JSON object a line, to <workdir>/webhook.jsonl.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
ALERT = "GPUBusyButUnproductive"
HOLLOW_GPU = "5"
NODE_NAME = "sim-node"
DURATION = re.compile(r"^(\d+)([smh])$")
RANGE = re.compile(r"\[\d+[smh]\]")
SECONDS = {"s": 1, "m": 60, "h": 3600}


def port_or_free(preferred: int) -> int:
    """``preferred`` when it is free on loopback, else any free port (0 = any)."""
    for candidate in (preferred, 0) if preferred else (0,):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port")


def cap_duration(value: str, cap_seconds: int) -> str:
    match = DURATION.match(value)
    if not match:
        raise ValueError(f"unexpected duration {value!r}")
    seconds = int(match[1]) * SECONDS[match[2]]
    return f"{min(seconds, cap_seconds)}s"


def stack_rules(cap_seconds: int, window: str) -> dict[str, Any]:
    """Our rule files as one document: `for:` capped, range windows shortened to ``window``
    and group intervals removed."""
    groups: list[dict[str, Any]] = []
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            group.pop("interval", None)
            for rule in group["rules"]:
                rule["expr"] = RANGE.sub(f"[{window}]", rule["expr"])
                if "for" in rule:
                    rule["for"] = cap_duration(rule["for"], cap_seconds)
            groups.append(group)
    return {"groups": groups}


def stack_alertmanager(webhook: str, group_wait: str) -> dict[str, Any]:
    """The example configuration with every receiver pointed at the local webhook."""
    config = yaml.safe_load((ROOT / "alerts" / "alertmanager.example.yml").read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook}/{receiver['name']}"
    routes = [config["route"], *config["route"].get("routes", [])]
    for route in routes:
        if "group_wait" in route:
            route["group_wait"] = group_wait
    config["route"].update(group_wait=group_wait, group_interval="10s")
    return dict(config)


class Webhook(http.server.BaseHTTPRequestHandler):
    """Appends every notification to the server's ``sink`` file."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            payload = json.loads(body)
        except ValueError:
            payload = {"unparsed": body.decode(errors="replace")}
        payload["path"] = self.path
        sink: Path = self.server.sink  # type: ignore[attr-defined]
        with sink.open("a") as out:
            out.write(json.dumps(payload, sort_keys=True) + "\n")
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def start_webhook(port: int, sink: Path) -> http.server.ThreadingHTTPServer:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Webhook)
    server.sink = sink  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready after {timeout:.0f}s")
        time.sleep(0.2)


def delivered(sink: Path) -> list[dict[str, Any]]:
    """Firing alerts named ALERT for the hollow GPU that reached the webhook."""
    if not sink.exists():
        return []
    found = []
    for line in sink.read_text().splitlines():
        payload = json.loads(line)
        for alert in payload.get("alerts", []):
            labels = alert.get("labels", {})
            if (labels.get("alertname") == ALERT and labels.get("gpu") == HOLLOW_GPU
                    and alert.get("status") == "firing"):
                found.append(alert)
    return found


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        bootstrap = ROOT / "scripts" / "bootstrap.sh"
        print(f"stack: {binary} is missing; running {bootstrap}", flush=True)
        subprocess.run([str(bootstrap)], check=True)
        path = shutil.which(binary)
    if path is None:
        raise SystemExit(f"stack: {binary} is not installed (apt-get install prometheus "
                         "prometheus-alertmanager)")
    return path


class Stack:
    def __init__(self, workdir: Path, test: bool) -> None:
        self.workdir = workdir
        self.test = test
        self.procs: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        self.logs: list[Any] = []

    def spawn(self, name: str, argv: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.logs.append(log)
        self.names.append(name)
        self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           cwd=ROOT))

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self.logs:
            log.close()

    def check_alive(self) -> None:
        for name, proc in zip(self.names, self.procs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}; "
                                   f"see {self.workdir / (name + '.log')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--test", action="store_true",
                        help="short durations; exit 0 once the alert reached the webhook")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".stack",
                        help="configuration, data, logs and webhook.jsonl (default .stack/)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for the alert (default 300)")
    args = parser.parse_args(argv)

    prometheus_bin = require("prometheus")
    alertmanager_bin = require("prometheus-alertmanager")
    workdir: Path = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    interval, cap, window, group_wait = (("1s", 10, "20s", "1s") if args.test
                                         else ("5s", 60, "1m", "5s"))
    fixed = not args.test
    ports = {name: port_or_free(p if fixed else 0) for name, p in
             (("exporter", 19433), ("prometheus", 19090), ("alertmanager", 19093),
              ("webhook", 19095), ("engine_decode", 18000), ("engine_stalled", 18001))}
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    sink = workdir / "webhook.jsonl"

    (workdir / "goodput.stack.rules.yml").write_text(yaml.safe_dump(stack_rules(cap, window),
                                                                    sort_keys=False))
    (workdir / "alertmanager.yml").write_text(
        yaml.safe_dump(stack_alertmanager(url["webhook"], group_wait), sort_keys=False))
    (workdir / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": ["goodput.stack.rules.yml"],
        "alerting": {"alertmanagers": [
            {"static_configs": [{"targets": [f"127.0.0.1:{ports['alertmanager']}"]}]}]},
        "scrape_configs": [{"job_name": "goodput",
                            "static_configs": [{"targets": [f"127.0.0.1:{ports['exporter']}"]}]}],
    }, sort_keys=False))

    # Simulated serving engines, so the serving dashboard and token rules have data: a vLLM
    # decoding on the memory-bound GPU 3, and one on the compute-bound GPU 2 that has stopped
    # producing tokens (busy but no output).
    (workdir / "exporter.yml").write_text(yaml.safe_dump({"serving": {"interval": 1, "targets": [
        {"url": f"{url['engine_decode']}/metrics", "gpus": ["3"]},
        {"url": f"{url['engine_stalled']}/metrics", "gpus": ["2"]},
    ]}}, sort_keys=False))

    webhook = start_webhook(ports["webhook"], sink)
    stack = Stack(workdir, args.test)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for engine, model, rate in (("engine_decode", "sim/llama-3-8b", "2400"),
                                    ("engine_stalled", "sim/mixtral-8x7b", "0")):
            stack.spawn(engine, [sys.executable, "-m", "exporter.sim.fake_engine",
                                 "--port", str(ports[engine]), "--model", model,
                                 "--rate", rate, "--prompt-rate", rate])
        stack.spawn("exporter", [sys.executable, "-m", "exporter", "--simulate",
                                 "--config", str(workdir / "exporter.yml"),
                                 "--listen", f"127.0.0.1:{ports['exporter']}",
                                 "--node-name", NODE_NAME, "--log-format", "console"])
        stack.spawn("alertmanager", [
            alertmanager_bin, f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
            "--cluster.listen-address="])
        stack.spawn("prometheus", [
            prometheus_bin, f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}"])
        wait_http(f"{url['exporter']}/metrics", 30)
        wait_http(f"{url['alertmanager']}/-/ready", 30)
        wait_http(f"{url['prometheus']}/-/ready", 30)
        print("\n".join([
            "gpu-goodput-exporter local stack (simulated 8-GPU node):",
            f"  exporter      {url['exporter']}/metrics",
            f"  prometheus    {url['prometheus']}   (alerts: {url['prometheus']}/alerts)",
            f"  alertmanager  {url['alertmanager']}   (amtool --alertmanager.url="
            f"{url['alertmanager']} alert query)",
            f"  webhook       {url['webhook']}   -> {sink}",
            f"  logs          {workdir}",
            f"Waiting for {ALERT} on gpu {HOLLOW_GPU} to reach the webhook "
            f"(for: capped at {cap}s)...",
        ]), flush=True)
        started = time.monotonic()
        while not delivered(sink):
            stack.check_alive()
            if time.monotonic() - started > args.timeout:
                print(f"stack: {ALERT} did not reach the webhook in {args.timeout:.0f}s",
                      file=sys.stderr)
                return 1
            time.sleep(0.5)
        alert = delivered(sink)[0]
        print(f"{ALERT} reached the webhook after {time.monotonic() - started:.0f}s: "
              f"{alert['annotations'].get('description', '')}", flush=True)
        if args.test:
            return 0
        print("Stack running; Ctrl-C stops it.", flush=True)
        while True:
            stack.check_alive()
            time.sleep(1)
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()
        webhook.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
