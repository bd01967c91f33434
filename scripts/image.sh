#!/usr/bin/env bash
# Build the exporter's container image with docker, podman or buildah (the first that works).
#
#   scripts/image.sh                          # gpu-goodput-exporter:<version>, standard target
#   scripts/image.sh --tag registry.example.com/gpu-goodput-exporter:0.1.0
#   scripts/image.sh --extras kubernetes      # + the Kubernetes client (serving pod discovery)
#   scripts/image.sh --target dcgm            # + DCGM; pulls NVIDIA's DCGM image (nvcr.io)
#   scripts/image.sh --debian-base            # no registry: Debian bases made with mmdebstrap
#   scripts/image.sh --source https://...     # image.source label (default: https origin remote)
#
# --debian-base (what CI uses; root, buildah and mmdebstrap) builds the two base images from
# Debian bookworm packages instead of pulling python:3.12-slim: a build base with pip and a
# pip-less runtime base, so the image holds Python, the venv and nothing else.
# Prints the image name on the last line of stdout.
set -euo pipefail
shopt -s inherit_errexit  # a failing mmdebstrap inside $(...) stops the script
cd "$(dirname "$0")/.."

target=standard tag="" extras="" debian_base=0 tool="${IMAGE_TOOL:-}"
source_url="$(git remote get-url origin 2>/dev/null || true)"
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --extras) extras="$2"; shift 2 ;;
    --source) source_url="$2"; shift 2 ;;
    --tool) tool="$2"; shift 2 ;;
    --debian-base) debian_base=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

version="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' exporter/__init__.py)"
[ -n "$version" ] || { echo "image.sh: no __version__ in exporter/__init__.py" >&2; exit 1; }
if [ -z "$tag" ]; then
  tag="gpu-goodput-exporter:${version}"
  [ "$target" = dcgm ] && tag="${tag}-dcgm"
fi
# An https remote is a page users can open; anything else (ssh, local path) is left out.
case "$source_url" in https://*) source_url="${source_url%.git}" ;; *) source_url="" ;; esac

if [ -z "$tool" ]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then tool=docker
  elif command -v podman >/dev/null 2>&1; then tool=podman
  elif command -v buildah >/dev/null 2>&1; then tool=buildah
  else
    echo "image.sh: needs docker (with a running engine), podman or buildah" >&2; exit 1
  fi
fi
# buildah without a daemon: vfs storage and chroot isolation work in any container or VM.
buildah_cmd=(buildah --storage-driver "${BUILDAH_STORAGE_DRIVER:-vfs}")

image_exists() {
  case "$tool" in
    buildah) "${buildah_cmd[@]}" inspect --type image "$1" >/dev/null 2>&1 ;;
    *) "$tool" image inspect "$1" >/dev/null 2>&1 ;;
  esac
}

# A base image from a Debian rootfs tarball: name, then mmdebstrap arguments. The tag is a
# hash of the arguments, so a changed recipe makes a new base; prints the image's name.
debian_base_image() {
  local name; name="$1:bookworm-$(printf '%s\n' "$@" | sha256sum | cut -c1-12)"; shift
  echo "$name"
  if image_exists "$name"; then return; fi
  command -v mmdebstrap >/dev/null || { echo "image.sh: --debian-base needs mmdebstrap" >&2; exit 1; }
  local dir; dir="$(mktemp -d)"
  echo "image.sh: making the base $name with mmdebstrap (Debian's packages; a minute or two)" >&2
  # merged-usr hook: no usrmerge package (and so no perl); no docs, man pages or locales.
  # Not --quiet: its "I: ..." lines name each phase (download, extract, install, tarball).
  mmdebstrap --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$@" bookworm "$dir/rootfs.tar" >&2
  echo "image.sh: importing $name into $tool" >&2
  case "$tool" in
    buildah)
      local ctr; ctr="$("${buildah_cmd[@]}" from scratch)"
      "${buildah_cmd[@]}" add "$ctr" "$dir/rootfs.tar" / >/dev/null
      "${buildah_cmd[@]}" config --cmd /usr/bin/python3 "$ctr"
      "${buildah_cmd[@]}" commit --quiet --rm "$ctr" "$name" >/dev/null ;;
    *) "$tool" import "$dir/rootfs.tar" "$name" >/dev/null ;;
  esac
  rm -rf "$dir"
}

args=(--target "$target" -t "$tag"
      --build-arg "VERSION=$version"
      --build-arg "REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)"
      --build-arg "CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      --build-arg "SOURCE=$source_url"
      --build-arg "EXTRAS=$extras")
if [ "$debian_base" = 1 ]; then
  # Debian's python3 and python-is-python3 in both bases: the venv's /usr/bin/python link holds.
  build_base="$(debian_base_image localhost/gge-debian-build --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates)"
  # No apt in the runtime base, no iconv modules (Python does not use them).
  runtime_base="$(debian_base_image localhost/gge-debian-runtime --variant=essential \
    --dpkgopt='path-exclude=/usr/lib/*/gconv/*' \
    --include=python3,python-is-python3,ca-certificates)"
  args+=(--build-arg "PYTHON_IMAGE=$build_base" --build-arg "RUNTIME_IMAGE=$runtime_base")
fi

echo "image.sh: building $tag (target $target) with $tool" >&2
case "$tool" in
  docker) docker build "${args[@]}" . >&2 ;;
  podman) podman build --format docker "${args[@]}" . >&2 ;;
  buildah)
    # The host's CA bundle for pip inside the build (for TLS-intercepting proxies); Docker
    # format keeps the HEALTHCHECK.
    certs=()
    [ -d /etc/ssl/certs ] && certs=(-v /etc/ssl/certs:/etc/ssl/certs:ro)
    "${buildah_cmd[@]}" bud --isolation chroot --format docker --layers "${certs[@]}" \
      "${args[@]}" . >&2 ;;
esac
echo "$tag"
