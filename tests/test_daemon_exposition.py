"""The real daemon's /metrics after every kind of trouble it counts passes `promtool check
metrics` and holds no NaN or ±Inf sample.

tests/test_exposition.py checks the collectors' families over a snapshot; this drives the
daemon itself, so the families that only a running process publishes are in the body too:
serving values dropped at the edge (a hostile engine: churning model names, 1e308, NaN, a
negative counter), a target cut under the model cap, a refused login
(`goodput_exporter_http_auth_failures_total`) and a SIGHUP reload
(`goodput_exporter_config_last_reload_*`). /debug/state stays within the model cap too.
"""

from __future__ import annotations

import base64
import math
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt

from tests.support.prometheus import require
from tests.support.serving import ThreadEngine
from tests.test_fault_battery import OpsDaemon, samples, value

# What the hostile engine sends, scrape after scrape (then it starts again).
_VALUES = ("100", "1e308", "NaN", "+Inf", "-5", "1e18", "200")
_JUMPS = ("100", "1e18", "1e308", "200", "300")


def _hostile_engine(jumps: bool = False) -> ThreadEngine:
    """A vLLM-shaped engine on a loopback thread: a new model name on every scrape and
    generation counters that are huge, NaN, infinite or negative in turn; with ``jumps``,
    one model whose counter jumps to 1e18 and 1e308 and then grows normally."""

    def body(n: int) -> str:
        model = f"model-{n}-" + "x" * 300  # over the label length bound too
        gen = _VALUES[n % len(_VALUES)]
        if jumps:
            model, gen = "m", _JUMPS[min(n, len(_JUMPS) - 1)]
        return (
            "# TYPE vllm:generation_tokens_total counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="{model}"}} {gen}\n'
            "# TYPE vllm:prompt_tokens_total counter\n"
            f'vllm:prompt_tokens_total{{engine="0",model_name="{model}"}} {n}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{model}"}} NaN\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0",model_name="{model}"}} +Inf\n'
        )

    return ThreadEngine(body)


def _get(url: str, password: str) -> tuple[int, str]:
    token = base64.b64encode(f"prom:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def test_the_daemons_metrics_after_hostile_input_pass_promtool_and_are_finite(
    tmp_path: Path,
) -> None:
    engine, jumper = _hostile_engine(), _hostile_engine(jumps=True)
    cfg, web = tmp_path / "config.yaml", tmp_path / "web.yml"
    cfg.write_text(
        "serving:\n  interval: 0.2\n  max_models_per_target: 2\n"
        f"  targets:\n  - url: {engine.url}\n    gpus: ['0']\n"
        f"  - url: {jumper.url}\n    gpus: ['0']\n"
    )
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=4)).decode()
    web.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n")
    daemon = OpsDaemon(tmp_path, "--config", str(cfg), "--web-config-file", str(web))
    try:
        metrics = daemon.url + "/metrics"
        assert _get(metrics, "wrong")[0] == 401
        daemon.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while True:  # a reload has happened and every hostile value has been served
            found = samples(_get(metrics, "right")[1])
            reloaded = value(found, "goodput_exporter_config_last_reload_successful") == 1.0
            over_cap = value(found, "goodput_serving_target_dropped_values_total",
                             reason="max_models") or 0.0
            jumps = value(found, "goodput_serving_target_dropped_values_total",
                          target=jumper.url, reason="implausible") or 0.0
            if reloaded and over_cap >= len(_VALUES) and jumps >= 2:
                break
            assert time.monotonic() < deadline, "no reload or no dropped values in time"
            time.sleep(0.2)
        status, body = _get(metrics, "right")
        assert status == 200
        # /debug/state grew from 36 KB to 967 KB under churn: now it holds the admitted models.
        status, state = _get(daemon.url + "/debug/state", "right")
        assert status == 200 and len(set(re.findall(r"model-\d+", state))) <= 2
    finally:
        assert daemon.stop() == 0
        engine.close()
        jumper.close()

    found = samples(body)
    for name in (
        "goodput_exporter_http_auth_failures_total",
        "goodput_exporter_config_last_reload_success_timestamp_seconds",
        "goodput_serving_target_dropped_values_total",
        "goodput_gpu_tokens_total",
    ):
        assert any(n == name for n, _ in found), name
    assert value(found, "goodput_exporter_http_auth_failures_total",
                 reason="wrong_credentials") == 1.0
    # The 1e18 jump once published 1.3e18 tokens per SM-second and an MFU of 1: totals hold
    # only accepted deltas (100, then a reset to 200, then +100), and derived values, where
    # the step publishes them, stay physical.
    assert value(found, "goodput_gpu_tokens_total", gpu="0", kind="generation",
                 model="m") == 400.0
    assert (value(found, "goodput_gpu_tokens_per_sm_second", gpu="0") or 0) < 2e6
    assert (value(found, "goodput_gpu_mfu_ratio", gpu="0") or 0) <= 1
    bad = {key: v for key, v in found.items() if not math.isfinite(v)}
    assert bad == {}, bad
    proc = subprocess.run([require("promtool"), "check", "metrics"], input=body.encode(),
                          capture_output=True, check=False, timeout=30)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert proc.stdout.strip() == b"" and proc.stderr.strip() == b"", proc.stdout + proc.stderr
