"""Logs for people: what a fresh start of the simulated node prints, in both formats, and the
words configuration and usage errors use."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter import cli
from exporter.wiring.config import ConfigError, build
from tests.conftest import REPO

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def _first_seconds(tmp_path: Path, *args: str, seconds: float = 7.0) -> list[str]:
    """The daemon's log lines from its first ``seconds`` on the simulated node."""
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--simulate", "--listen", "127.0.0.1:0", *args],
            cwd=REPO, env=ENV, stdout=out, stderr=subprocess.STDOUT)
        try:
            time.sleep(seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    return log.read_text().splitlines()


def test_start_up_fits_a_screen_names_the_url_and_uses_words(tmp_path: Path) -> None:
    lines = _first_seconds(tmp_path)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    names = [e["event"] for e in events]
    started = next(e for e in events if e["event"] == "started")
    assert names.index("started") <= 1  # only "listening" (port 0) may come first
    assert started["url"].startswith("http://127.0.0.1:") and started["gpus"] == 12
    assert started["profiling"] == "gpm on 12 GPUs" and started["serving_targets"] == 0
    program, *rest = shlex.split(started["top"])  # a command this install can run as typed
    assert rest == ["top", "--url", f"{started['url']}metrics"] or rest[:3] == [
        "-m", "exporter", "top"], started["top"]
    assert shutil.which(program, path=ENV.get("PATH")) or (REPO / program).is_file(), program
    before_stop = names[: names.index("stopped")] if "stopped" in names else names
    assert len(before_stop) <= 24, names  # one screen: the start line and first verdicts
    for quiet in ("gpm_support", "profiling_source_selected", "nvml_ready", "source_ok"):
        assert quiet not in names  # per-GPU and per-source start-up detail is debug
    regimes = [e["state"] for e in events if e["event"] == "regime_changed"]
    assert "unknown" not in regimes and len(regimes) == 12
    for e in events:  # every value a word, a number or a mapping of words
        assert not any(isinstance(v, list) and e["event"] != "started" for v in e.values()), e
    flags = [e["state"] for e in events if e["event"] == "busy_unproductive_changed"]
    assert flags == ["hollow_busy"]


def test_console_format_reads_as_words(tmp_path: Path) -> None:
    lines = _first_seconds(tmp_path, "--log-format", "console", seconds=5.0)
    text = "\n".join(lines)
    assert "started" in lines[0] or "started" in lines[1]
    assert "url=http://127.0.0.1:" in text
    assert "(True" not in text and "state=(" not in text


def test_debug_still_has_the_per_gpu_detail(tmp_path: Path) -> None:
    lines = _first_seconds(tmp_path, "--log-level", "debug", seconds=3.0)
    names = [json.loads(line)["event"] for line in lines if line.startswith("{")]
    assert names.count("gpm_support") == 12 and names.count("profiling_source_selected") == 12
    assert "source_ok" in names


@pytest.mark.parametrize(("flags", "words"), [
    ({"interval": 61}, "bad value for 'interval': must be at most 60 seconds"),
    ({"interval": 0}, "bad value for 'interval': must be at least 0.1 seconds"),
    ({"listen": "nowhere"}, "bad value for 'listen': listen address 'nowhere' is not HOST:PORT"),
    ({"simulate_gpus": 0}, "bad value for 'simulate_gpus': must be at least 1"),
])
def test_configuration_errors_in_words(flags: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        build(flags, {})
    assert str(err.value) == words


def test_usage_error_is_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "exporter", "--log-format", "text"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "gpu-goodput-exporter: argument --log-format: invalid choice: 'text' "
        "(choose from 'json', 'console') (see --help)"]


def test_a_misspelt_flag_gets_did_you_mean_like_a_misspelt_variable() -> None:
    for argv, words in ((["--intervl", "2"], "--intervl: did you mean --interval?"),
                        (["top", "--filtr=x"], "--filtr: did you mean --filter?")):
        done = subprocess.run([sys.executable, "-m", "exporter", *argv], cwd=REPO, env=ENV,
                              capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert words in done.stderr and done.stderr.endswith("(see --help)\n"), done.stderr
    assert cli.parser().did_you_mean("unrecognized arguments: --zzzzzz") == ""


def test_a_misspelt_config_file_key_gets_did_you_mean_like_a_misspelt_flag(
        tmp_path: Path) -> None:
    """A typo in the config file is one line naming the key and the one it resembles, at
    any depth, as flags and variables get; a key that resembles nothing gets no guess."""
    config = tmp_path / "config.yaml"
    config.write_text("intervl: 2\nserving:\n  targets:\n    - url: http://127.0.0.1:1/m\n"
                      "      gpu: ['0']\nkubernetes:\n  kubelet_sock: /x\nzzzzzz: 1\n")
    done = subprocess.run([sys.executable, "-m", "exporter", "--config", str(config),
                           "--simulate"], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    for words in ("unknown config key 'intervl' (did you mean 'interval'?)",
                  "unknown config key 'serving.targets.0.gpu' (did you mean "
                  "'serving.targets.0.gpus'?)",
                  "unknown config key 'kubernetes.kubelet_sock' (did you mean "
                  "'kubernetes.kubelet_socket'?)",
                  "unknown config key 'zzzzzz'\n"):
        assert words in done.stderr, done.stderr


def test_an_ignored_variable_that_looks_like_a_typo_names_the_setting() -> None:
    assert cli.did_you_mean(["GOODPUT_INTERVL", "GOODPUT_PORT_9433_TCP",
                             "GOODPUT_SERVING__INTERVALL"]) == {"did_you_mean": {
        "GOODPUT_INTERVL": "GOODPUT_INTERVAL",
        "GOODPUT_SERVING__INTERVALL": "GOODPUT_SERVING__INTERVAL"}}
    assert cli.did_you_mean(["GOODPUT_SERVICE_HOST"]) == {}


def test_make_runs_node_serves_and_scrapes_two_simulated_engines(tmp_path: Path) -> None:
    lines = _first_seconds(tmp_path, "--simulate-engines", seconds=5.0)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    started = next(e for e in events if e["event"] == "started")
    assert started["serving_targets"] == 2
    up = sorted((e["models"][0], e["gpus"]) for e in events
                if e["event"] == "serving_target_up")
    assert up == [("sim/llama-3-8b", ["3"]), ("sim/mixtral-8x7b", ["2"])], events
    assert not any(e["event"] == "serving_target_unattributed" for e in events)
    few = _first_seconds(tmp_path, "--simulate-engines", "--simulate-gpus", "2", seconds=3.0)
    assert '"serving_targets": 0' in next(x for x in few if '"started"' in x)
