#!/usr/bin/env bash
# Does NVML GPM work for an unprivileged user?  Run as root on a machine with an NVIDIA GPU and
# nvidia-ml-py importable (PYTHONPATH is passed through to the unprivileged user).
#
#   OUT=/some/dir bash bench/gpu/gpm_privileges.sh          # writes $OUT/gpm_privileges.txt
#
# It creates a throwaway user (goodput-gpm-probe) unless it exists, then runs the same probe as
# root and as that user: nvmlInit, nvmlGpmQueryDeviceSupport, two nvmlGpmSampleGet one second
# apart (under load from a tiny busy loop if torch is importable) and nvmlGpmMetricsGet for
# SM_UTIL (metric id 2), printing success or the NVML error code of each call. It also records
# the driver's RmProfilingAdminOnly / NVreg_RestrictProfilingToAdminUsers setting, which
# decides the answer on most drivers. No network needed.
set -u
OUT="${OUT:-${1:-.}}"
mkdir -p "$OUT"
REPORT="$OUT/gpm_privileges.txt"
PROBE_USER="${PROBE_USER:-goodput-gpm-probe}"
PY="${PYTHON:-$(command -v python3)}"
WORK="$(mktemp -d /tmp/gpm_priv.XXXXXX)"
chmod 755 "$WORK"

cat > "$WORK/probe.py" <<'PYEOF'
import os, sys, time, threading

def say(*a):
    print(*a, flush=True)

say(f"uid={os.getuid()} euid={os.geteuid()} user={os.environ.get('USER', '?')}")
try:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("CapEff", "CapPrm")):
                say(line.strip())
except OSError:
    pass
try:
    import pynvml as N
except Exception as exc:
    say(f"import pynvml: FAILED {type(exc).__name__}: {exc}")
    sys.exit(0)

def call(label, fn, *args):
    try:
        out = fn(*args)
        say(f"{label}: OK")
        return True, out
    except N.NVMLError as exc:
        say(f"{label}: FAILED NVML error {getattr(exc, 'value', '?')} ({exc})")
    except Exception as exc:
        say(f"{label}: FAILED {type(exc).__name__}: {exc}")
    return False, None

ok, _ = call("nvmlInit", N.nvmlInit)
if not ok:
    sys.exit(0)
say(f"driver {N.nvmlSystemGetDriverVersion()}  devices {N.nvmlDeviceGetCount()}")

def load():
    try:
        import torch
        if not torch.cuda.is_available():
            return
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        end = time.time() + 3
        while time.time() < end:
            a @ a
        torch.cuda.synchronize()
    except Exception as exc:  # no torch or no permission on /dev/nvidia*: GPM still answers
        say(f"(no load: {type(exc).__name__}: {exc})")

for i in range(N.nvmlDeviceGetCount()):
    h = N.nvmlDeviceGetHandleByIndex(i)
    say(f"--- GPU {i}: {N.nvmlDeviceGetName(h)}")
    ok, sup = call("nvmlGpmQueryDeviceSupport", N.nvmlGpmQueryDeviceSupport, h)
    if ok:
        say(f"  isSupportedDevice={sup.isSupportedDevice}")
        if not sup.isSupportedDevice:
            continue
    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.5)
    s1 = N.nvmlGpmSampleAlloc()
    s2 = N.nvmlGpmSampleAlloc()
    ok1, _ = call("nvmlGpmSampleGet #1", N.nvmlGpmSampleGet, h, s1)
    time.sleep(1.0)
    ok2, _ = call("nvmlGpmSampleGet #2", N.nvmlGpmSampleGet, h, s2)
    t.join()
    if ok1 and ok2:
        req = N.c_nvmlGpmMetricsGet_t()
        req.version = N.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = 1
        req.sample1, req.sample2 = s1, s2
        req.metrics[0].metricId = 2  # NVML_GPM_METRIC_SM_UTIL
        ok, _ = call("nvmlGpmMetricsGet(SM_UTIL)", N.nvmlGpmMetricsGet, req)
        if ok:
            m = req.metrics[0]
            say(f"  SM_UTIL nvmlReturn={m.nvmlReturn} value={m.value:.2f}%")
    N.nvmlGpmSampleFree(s1)
    N.nvmlGpmSampleFree(s2)
N.nvmlShutdown()
PYEOF
chmod 644 "$WORK/probe.py"

{
  echo "# gpm_privileges $(date -u +%FT%TZ) host=$(hostname)"
  echo "kernel: $(uname -r)"
  echo "python: $PY"
  echo "PYTHONPATH: ${PYTHONPATH:-}"
  echo "--- driver profiling restriction"
  grep -H . /proc/driver/nvidia/params 2>/dev/null | grep -i -E 'RmProfilingAdminOnly|RestrictProfiling' \
    || echo "(no RmProfilingAdminOnly in /proc/driver/nvidia/params)"
  grep -r -i RestrictProfilingToAdminUsers /etc/modprobe.d 2>/dev/null || echo "(no NVreg_RestrictProfilingToAdminUsers in /etc/modprobe.d)"
  ls -l /dev/nvidia* 2>/dev/null | head -20
  echo
  echo "=== as root"
  "$PY" "$WORK/probe.py" 2>&1
  echo
  if ! id "$PROBE_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$PROBE_USER" 2>&1 \
      || useradd -M -s /bin/false "$PROBE_USER" 2>&1 || echo "useradd failed"
  fi
  echo "=== as unprivileged user $PROBE_USER ($(id "$PROBE_USER" 2>&1))"
  ENVS=(env -i "PATH=$PATH" "HOME=/tmp" "USER=$PROBE_USER" "PYTHONPATH=${PYTHONPATH:-}"
        "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}")
  if command -v setpriv >/dev/null 2>&1; then
    uid=$(id -u "$PROBE_USER"); gid=$(id -g "$PROBE_USER")
    setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all --bounding-set=-all \
      "${ENVS[@]}" "$PY" "$WORK/probe.py" 2>&1
  elif command -v runuser >/dev/null 2>&1; then
    runuser -u "$PROBE_USER" -- "${ENVS[@]}" "$PY" "$WORK/probe.py" 2>&1
  else
    su -s /bin/sh "$PROBE_USER" -c "$(printf '%q ' "${ENVS[@]}" "$PY" "$WORK/probe.py")" 2>&1
  fi
} > "$REPORT" 2>&1

rm -rf "$WORK"
cat "$REPORT"
