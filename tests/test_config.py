"""Configuration layering and errors that name the key."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel

from exporter.cli import main
from exporter.settings.section import MAX_INTERVAL, Section
from exporter.sources.serving.config import ServingConfig
from exporter.wiring.config import (
    ConfigError,
    Settings,
    build,
    from_env,
    ignored_env,
    parse_listen,
)


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
    assert s.section(ServingConfig).targets[0].gpus == ["0"]


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


# --- config edges: file encoding, finite values, interval bounds ([trust] item 6) ---------


def test_a_non_utf8_config_file_is_one_line_naming_the_file(tmp_path):
    cfg = tmp_path / "latin1.yml"
    cfg.write_bytes("interval: 2  # r\u00e9glage\n".encode("latin-1"))
    with pytest.raises(ConfigError) as err:
        build({}, {}, str(cfg))
    message = str(err.value)
    assert str(cfg) in message and "not UTF-8" in message and "\n" not in message


def test_a_yaml_syntax_error_is_one_line_with_its_place(tmp_path):
    cfg = tmp_path / "broken.yml"
    cfg.write_text("serving:\n  targets: [http://a:1/metrics,\n")
    with pytest.raises(ConfigError) as err:
        build({}, {}, str(cfg))
    message = str(err.value)
    assert str(cfg) in message and "line 3" in message and "\n" not in message


def _interval_paths(model: type = Settings, prefix: str = "") -> list[str]:
    """Every setting whose name says it is an interval, anywhere in the tree."""
    paths = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += _interval_paths(annotation, f"{prefix}{name}.")
        elif "interval" in name:
            paths.append(prefix + name)
    return paths


def _nested(path: str, value: object) -> dict[str, object]:
    tree: dict[str, object] = {}
    node = tree
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[leaf] = value
    return tree


INTERVALS = _interval_paths()


def test_the_interval_list_is_complete():
    assert {"interval", "serving.interval", "kubernetes.interval", "model.interval",
            "profiling.dcgm_interval"} <= set(INTERVALS)


@pytest.mark.parametrize("path", INTERVALS)
@pytest.mark.parametrize("value", [float("inf"), float("nan"), MAX_INTERVAL + 1, -1.0])
def test_every_interval_is_finite_positive_and_at_most_an_hour(path, value):
    with pytest.raises(ConfigError, match=re.escape(f"'{path}'")):
        build(_nested(path, value), {})


@pytest.mark.parametrize("raw", [".inf", "-.inf", ".nan"])
def test_no_setting_takes_inf_or_nan_from_a_file(tmp_path, raw):
    cfg = tmp_path / "c.yml"
    cfg.write_text(f"serving:\n  timeout: {raw}\n")
    with pytest.raises(ConfigError, match=r"serving\.timeout.*finite"):
        build({}, {}, str(cfg))


def test_listen_port_0_means_a_free_port():
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_listen(":0") == ("", 0)
    assert build({"listen": "[::1]:0"}, {}).listen == "[::1]:0"
    with pytest.raises(ValueError):
        parse_listen("127.0.0.1:65536")


def test_every_interval_setting_is_finite_and_at_most_an_hour() -> None:
    """Issue 22: `serving.interval: .inf` polled once and never again. Every setting named
    like an interval, in every section, has an upper bound of at most an hour."""
    import annotated_types

    from exporter.collectors import REGISTRY
    from exporter.settings.core import CoreSettings

    checked = []
    sections = [CoreSettings, *(c.config for c in REGISTRY if c.config)]
    for model in sections:
        assert issubclass(model, Section)
        for name, field in model.model_fields.items():
            if "interval" not in name:
                continue
            bounds = [m for m in field.metadata if isinstance(m, (annotated_types.Le,
                                                                  annotated_types.Lt))]
            limit = [getattr(m, "le", getattr(m, "lt", None)) for m in bounds]
            assert limit and min(limit) <= MAX_INTERVAL, f"{model.__name__}.{name}"
            checked.append(name)
    assert len(checked) >= 6
