#!/usr/bin/env bash
# Make this checkout runnable on a fresh Debian/Ubuntu machine: a virtualenv with the package
# and its dev tools, and with --tools the real Prometheus and VictoriaMetrics tools the tests
# use (when missing).
# --runtime installs the package with its runtime dependencies only (make run), unless the
# dev install is already there. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# Run "$@", saying every 20 s that it still runs: a first install takes minutes, and a
# first `make test` must never look hung.
ticking() {
  local what="$1" start=$SECONDS pid
  shift
  "$@" <&0 &  # keeps stdin (a script's background job would get /dev/null): sudo may ask
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 20); do
      sleep 1
      kill -0 "$pid" 2>/dev/null || break 2
    done
    echo "bootstrap: still $what ($((SECONDS - start)) s)"
  done
  wait "$pid"
}

need_apt=()
mode=dev
[ "${1:-}" = "--runtime" ] && mode=runtime
if [ "${1:-}" = "--tools" ]; then  # only the tests and the local stack need them
  for tool in prometheus promtool prometheus-alertmanager amtool victoria-metrics vmalert; do
    command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
  done
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  echo "bootstrap: installing prometheus, prometheus-alertmanager and victoria-metrics" \
    "(missing: ${need_apt[*]})"
  ticking "updating apt's package lists" $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive ticking "installing them with apt-get" \
    $sudo apt-get install -y -qq --no-install-recommends \
    prometheus prometheus-alertmanager victoria-metrics >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  if ! python3 -m venv .venv 2>/dev/null; then
    # Debian and Ubuntu ship venv separately
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    rm -rf .venv
    python3 -m venv .venv
  fi
fi
fresh() { [ -f "$1" ] && ! [ pyproject.toml -nt "$1" ]; }
dev_stamp=.venv/.installed
if [ "$mode" = runtime ]; then
  fresh "$dev_stamp" && exit 0  # the dev install includes the runtime one
  stamp=.venv/.installed-runtime spec='.'
else
  stamp=$dev_stamp spec='.[dev]'
fi
if ! fresh "$stamp"; then
  if [ "$mode" = runtime ]; then
    echo "bootstrap: installing the exporter and its runtime dependencies into .venv (about 30 s the first time)"
  else
    echo "bootstrap: installing the exporter, its dev tools and test dependencies into .venv (about 2 minutes the first time)"
  fi
  ticking "installing into .venv" .venv/bin/python -m pip install -q --upgrade pip
  ticking "installing into .venv" .venv/bin/python -m pip install -q -e "$spec"
  touch "$stamp"
fi
