"""Regenerates the pod-resources gRPC stubs from ``podresources.proto``.

Run ``python -m exporter.sources.kubernetes.gen_protos`` after editing the proto, and commit
the result; ``--check`` exits 1 when the committed stubs differ from a fresh generation (the
test suite runs the same comparison, so CI catches a proto edited without regenerating).
Needs grpcio-tools (a dev dependency); the runtime only imports the generated modules.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "podresources.proto"
GENERATED = ("podresources_pb2.py", "podresources_pb2.pyi", "podresources_pb2_grpc.py")

# grpcio-tools writes ``import podresources_pb2`` (a top-level module); the stubs live in a
# package, so the import is made relative to it.
_ABSOLUTE_IMPORT = "import podresources_pb2 as podresources__pb2"
_RELATIVE_IMPORT = "from . import podresources_pb2 as podresources__pb2"


def generate() -> dict[str, bytes]:
    """Run protoc on the proto and return {file name: content} of the stubs."""
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as out:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{HERE}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(HERE / PROTO),
            ]
        )
        if code != 0:
            raise RuntimeError(f"protoc failed on {PROTO} (exit {code})")
        files = {name: (Path(out) / name).read_bytes() for name in GENERATED}
    grpc_file = files["podresources_pb2_grpc.py"].decode()
    if _ABSOLUTE_IMPORT not in grpc_file:
        raise RuntimeError("generated podresources_pb2_grpc.py lacks the expected import")
    files["podresources_pb2_grpc.py"] = grpc_file.replace(
        _ABSOLUTE_IMPORT, _RELATIVE_IMPORT
    ).encode()
    return files


def stale_files(directory: Path = HERE) -> list[str]:
    """Names of committed stubs that differ from a fresh generation."""
    fresh = generate()
    return [
        name
        for name, content in fresh.items()
        if not (directory / name).exists() or (directory / name).read_bytes() != content
    ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--check"]:
        stale = stale_files()
        if stale:
            print(
                f"stale generated stubs: {', '.join(stale)}; run "
                "python -m exporter.sources.kubernetes.gen_protos",
                file=sys.stderr,
            )
            return 1
        return 0
    if args:
        print("usage: python -m exporter.sources.kubernetes.gen_protos [--check]", file=sys.stderr)
        return 2
    for name, content in generate().items():
        (HERE / name).write_bytes(content)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
