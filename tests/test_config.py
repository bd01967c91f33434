"""Configuration layering and errors that name the key."""

from __future__ import annotations

import pytest

from exporter.cli import main
from exporter.config import ConfigError, build, from_env, ignored_env, parse_listen


def test_precedence_flags_over_env_over_file(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("interval: 5\nlisten: ':1111'\nlog_format: console\n")
    env = {"GOODPUT_INTERVAL": "3", "GOODPUT_LISTEN": ":2222"}
    s = build({"interval": 2.0}, env, str(cfg))
    assert s.interval == 2.0  # flag
    assert s.listen == ":2222"  # env beats file
    assert s.log_format == "console"  # file beats default


def test_env_nests_and_parses_lists():
    env = {
        "GOODPUT_SERVING__TIMEOUT": "1.5",
        "GOODPUT_SERVING__TARGETS": '[{url: "http://127.0.0.1:8000/metrics", gpus: ["0"]}]',
        "PATH": "/bin",
    }
    tree = from_env(env)
    assert tree["serving"]["timeout"] == 1.5
    s = build({}, env)
    assert s.serving.targets[0].gpus == ["0"]


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"intervall": 1}, "unknown config key 'intervall'"),
        ({"serving": {"targetz": []}}, "unknown config key 'serving.targetz'"),
        ({"interval": "fast"}, "bad value for 'interval'"),
        ({"listen": "nowhere"}, "bad value for 'listen'"),
        ({"log_format": "xml"}, "bad value for 'log_format'"),
    ],
)
def test_bad_keys_and_values_name_the_key(layer, message):
    with pytest.raises(ConfigError, match=message):
        build(layer, {})


def test_unknown_env_variable_is_ignored_and_named():
    """Kubernetes injects GOODPUT_*_PORT=tcp://... for a Service named like the release:
    a variable that is not a setting must not stop the exporter; it is named instead."""
    env = {"GOODPUT_COLOUR": "blue", "GOODPUT_EXPORTER_PORT": "tcp://10.0.0.1:9433"}
    assert build({}, env) == build({}, {})
    assert ignored_env(env) == ["GOODPUT_COLOUR", "GOODPUT_EXPORTER_PORT"]


def test_bad_file_is_an_error(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        build({}, {}, str(bad))
    with pytest.raises(ConfigError, match=r"missing\.yml"):
        build({}, {}, str(tmp_path / "missing.yml"))


def test_cli_exits_2_on_a_bad_key(tmp_path, capsys):
    cfg = tmp_path / "c.yml"
    cfg.write_text("simulate: true\nbogus_key: 1\n")
    assert main(["--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "bogus_key" in err and err.count("\n") == 1


def test_cli_without_driver_suggests_simulate(capsys, monkeypatch):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU machine
        pynvml.nvmlShutdown()
        pytest.skip("a real NVIDIA driver is present")
    monkeypatch.delenv("GOODPUT_SIMULATE", raising=False)
    assert main(["--listen", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "--simulate" in err and err.count("\n") == 1


def test_parse_listen():
    assert parse_listen(":9433") == ("", 9433)
    assert parse_listen("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_listen("[::1]:9433") == ("::1", 9433)
    with pytest.raises(ValueError):
        parse_listen("127.0.0.1")


def test_config_file_from_the_environment(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "c.yml"
    cfg.write_text("simulate: true\nbogus_key: 1\n")
    monkeypatch.setenv("GOODPUT_CONFIG", str(cfg))
    assert main([]) == 2  # the file was read: its bad key is reported
    assert "bogus_key" in capsys.readouterr().err
    assert "config" not in from_env({"GOODPUT_CONFIG": str(cfg)})
