"""Release artefacts into dist/: the sdist and wheel (``python -m build``, ``twine check``)
and the Helm chart as a .tgz (Helm's own ``package`` through helm-python-sdk, then
``lint --strict`` on the archive), all at the one version in exporter/__init__.py.

The wheel is also installed into an empty venv, whose size is checked against a budget,
and its entry point must start (``--help``).

    .venv/bin/python scripts/package.py [--out dist] [--max-venv-mb 60]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "gpu-goodput-exporter"
sys.path.insert(0, str(ROOT))

from exporter import __version__  # noqa: E402

HEARTBEAT_S = 20.0
"""A step still running after this long says so, and how long it has run (CI's bar: a line at
least every 30 s; the isolated build env and the venv install are silent for a minute)."""


@contextmanager
def ticking(what: str) -> Iterator[None]:
    """Say ``package: still <what> (N s)`` every HEARTBEAT_S until the block ends."""
    started, stop = time.monotonic(), threading.Event()

    def tick() -> None:
        while not stop.wait(HEARTBEAT_S):
            print(f"package: still {what} ({time.monotonic() - started:.0f} s)", flush=True)

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()


def run(*cmd: str, quiet: bool = False) -> None:
    print("+", " ".join(cmd), flush=True)
    with ticking(f"running {Path(cmd[0]).name} {' '.join(cmd[1:3])}"):
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL if quiet else None)


def du_bytes(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], check=True, capture_output=True, text=True)
    return int(out.stdout.split()[0])


def check_versions() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if not chart["version"] == str(chart["appVersion"]) == __version__:
        sys.exit(f"package: Chart.yaml version {chart['version']} / appVersion "
                 f"{chart['appVersion']} differ from exporter.__version__ {__version__}")


def python_packages(out: Path) -> tuple[Path, Path]:
    run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), ".")
    wheel = out / f"gpu_goodput_exporter-{__version__}-py3-none-any.whl"
    sdist = out / f"gpu_goodput_exporter-{__version__}.tar.gz"
    for p in (wheel, sdist):
        if not p.is_file():
            sys.exit(f"package: {p.name} was not built")
    run(sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist))
    return wheel, sdist


def venv_footprint(wheel: Path, max_mb: float) -> float:
    """Install the wheel (runtime dependencies only) into an empty venv; its size in MB."""
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        run(sys.executable, "-m", "venv", "--without-pip", str(venv))
        run(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
            "-q", "--no-cache-dir", str(wheel))
        mb = du_bytes(venv) / 1e6
        run(str(venv / "bin" / "gpu-goodput-exporter"), "--help", quiet=True)
        run(str(venv / "bin" / "python"), "-c", "import exporter.wiring.daemon")
    print(f"package: pip install of the wheel into an empty venv: {mb:.1f} MB (budget {max_mb})")
    if mb > max_mb:
        sys.exit(f"package: the installed venv is {mb:.1f} MB, over {max_mb} MB")
    return mb


def helm_chart(out: Path) -> Path:
    import helm_python

    helm_python.disable_logging()
    print("package: the Helm chart (helm package, then lint --strict)", flush=True)
    archive = Path(helm_python.package(str(CHART), destination=str(out)))
    if archive.name != f"gpu-goodput-exporter-{__version__}.tgz":
        sys.exit(f"package: unexpected chart archive {archive.name}")
    values = {"image": {"repository": "registry.example.com/gpu-goodput-exporter"}}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        report = helm_python.lint(str(Path(tmp) / CHART.name), values, strict=True)
    problems = report["errors"] + [m for m in report["messages"] if m["severity"] >= 2]
    if problems:
        sys.exit(f"package: helm lint of the packaged chart: {problems}")
    print(f"package: {archive.name} lints clean ({archive.stat().st_size} bytes)")
    return archive


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "dist")
    ap.add_argument("--max-venv-mb", type=float, default=60.0)
    args = ap.parse_args()
    check_versions()
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    wheel, _ = python_packages(out)
    venv_footprint(wheel, args.max_venv_mb)
    helm_chart(out)
    for p in sorted(out.iterdir()):
        print(f"package: {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
