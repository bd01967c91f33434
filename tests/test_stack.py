"""`make stack` end to end: the simulated node's hollow GPU raises GPUBusyButUnproductive and
its Slurm job's straggler GPUJobStraggler in a real Prometheus, and a real Alertmanager
delivers both to the local webhook."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def check_delivered(workdir: Path, stdout: str) -> None:
    """What a ``scripts/stack.py --test`` run that exited 0 must have done, from its output
    and ``workdir``. Run by tests/test_docs_snippets.py, on the command as
    docs/dashboards.md writes it, pasted in a fresh clone."""
    lines = stdout.splitlines()
    assert "tokens/s on GPU 3" in stdout and "no tokens, on the busy GPU 2" in stdout
    assert lines[-1].startswith("stack: stopped the exporter, the engines"), lines[-3:]
    notifications = [json.loads(line) for line in
                     (workdir / "webhook.jsonl").read_text().splitlines()]
    # Each alert's real time, counted from the stack's start: never "after 0s".
    summary = lines[lines.index(
        "Alerts that reached the webhook (seconds after the stack started):") + 1:-1]
    came = {re.sub(r"^ *\d+ s  ", "", x): int(x.split()[0]) for x in summary}
    first = min(n["received_after_seconds"] for n in notifications)
    assert came and all(seconds >= int(first) > 5 for seconds in came.values()), summary
    assert {"GPUBusyButUnproductive (gpu 5)", "GPUJobStraggler (gpu 9)"} <= set(came), summary
    # docs/dashboards.md's timing table names every alert that reaches the webhook.
    docs = (ROOT / "docs" / "dashboards.md").read_text()
    table = docs[docs.index("| when | alerts"):docs.index("To make that fast")]
    missing = {name.split(" (")[0] for name in came} - set(re.findall(r"`(\w+)`", table))
    assert not missing, f"docs/dashboards.md's timing table leaves out {sorted(missing)}"
    firing = [(n["receiver"], a["labels"]) for n in notifications for a in n["alerts"]
              if a["labels"]["alertname"] == "GPUBusyButUnproductive"]
    assert any(labels["gpu"] == "5" and labels["node"] == "sim-node" and receiver == "gpu-team"
               for receiver, labels in firing), firing
    # Only the hollow GPU is flagged: the compute-, memory- and host-bound ones are not.
    assert {labels["gpu"] for _, labels in firing} == {"5"}
    # The simulated Slurm job 4242: GPU 9, stalled on its host, is its straggler; GPU 10
    # waits for it (its SMs busier, spinning in the collective) and is never paged.
    stragglers = [a["labels"] for n in notifications for a in n["alerts"]
                  if a["labels"]["alertname"] == "GPUJobStraggler" and a["status"] == "firing"]
    assert {(s["gpu"], s["job_source"], s["job_id"]) for s in stragglers} == {
        ("9", "slurm", "4242")}, stragglers


def test_stack_rules_are_valid(tmp_path: Path) -> None:
    """The stack's rules come from the mixin with short windows, and still pass promtool."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import stack
    finally:
        sys.path.pop(0)
    import yaml

    paths = []
    for name, text in stack.stack_rules(10, "20s").items():
        path = tmp_path / name
        path.write_text(text)
        paths.append(str(path))
        assert "[5m]" not in text and "[10m]" not in text and "[15m]" not in text
        for group in yaml.safe_load(text)["groups"]:
            assert "interval" not in group
            for rule in group["rules"]:
                assert rule.get("for", "0s").endswith("s"), rule
    assert sorted(stack.stack_rules(10, "20s")) == ["goodput.rules.yml",
                                                   "goodput_alerts.rules.yml"]
    result = subprocess.run(["promtool", "check", "rules", *paths], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    am = tmp_path / "am.yml"
    am.write_text(yaml.safe_dump(stack.stack_alertmanager("http://127.0.0.1:1", "1s")))
    result = subprocess.run(["amtool", "check-config", str(am)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_stack_does_not_edit_rule_text() -> None:
    """No regex over rule YAML: the stack goes through the mixin's configuration."""
    text = (ROOT / "scripts" / "stack.py").read_text()
    assert "import re\n" not in text and "re.sub" not in text


def _stack_module():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import stack
    finally:
        sys.path.pop(0)
    return stack


def test_a_port_left_in_time_wait_is_reused() -> None:
    """A quick restart keeps the stack's ports: the last run's connections in TIME_WAIT do
    not make the preferred port look taken (Prometheus binds it with SO_REUSEADDR too)."""
    import socket

    stack = _stack_module()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    accepted.close()  # the server side closes first: its end of the pair waits in TIME_WAIT
    server.close()
    client.close()
    with socket.socket() as plain:  # what the old check did, and why it moved the port
        try:
            plain.bind(("127.0.0.1", port))
            lingering = False
        except OSError:
            lingering = True
    assert lingering, "no TIME_WAIT on this kernel: nothing to show"
    assert stack.port_or_free(port) == port


def test_grafana_datasource_names_the_prometheus_really_started(tmp_path: Path) -> None:
    import yaml

    stack = _stack_module()
    path = stack.grafana_datasource(tmp_path, "http://127.0.0.1:40123")
    written = yaml.safe_load(path.read_text())
    committed = yaml.safe_load(stack.DATASOURCE.read_text())
    assert [d["url"] for d in written["datasources"]] == ["http://127.0.0.1:40123"]
    assert {**written["datasources"][0], "url": None} == {**committed["datasources"][0],
                                                          "url": None}
