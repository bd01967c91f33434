#!/usr/bin/env bash
# First contact with a real GPU: runs the daemon next to two short torch loads (large bf16
# GEMMs, then tiny kernels), keeps /metrics and /debug/state from each, records nvidia-smi,
# and checks whether NVML GPM works for an unprivileged user. Writes everything to $OUT.
# Usage (on the GPU machine, as root): OUT=/some/dir bench/gpu/gpu_smoke.sh
set -u
OUT=${OUT:-/tmp/smoke}; mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONPATH=${PYTHONPATH:-}:$PWD
{
  nvidia-smi; $PY -c 'import pynvml,sys; print("nvidia-ml-py", pynvml.__file__); print(sys.version)'
  $PY -m pip show nvidia-ml-py 2>/dev/null | head -2
} >"$OUT/env.txt" 2>&1

$PY -m exporter --listen 127.0.0.1:19433 --interval 1 >"$OUT/daemon.log" 2>&1 &
DPID=$!
sleep 4
load() {  # $1 = name, $2 = python body run for ~15 s
  $PY - <<PYEOF &
import time, torch
t_end = time.time() + 15
$2
PYEOF
  local lpid=$!
  sleep 11
  curl -s 127.0.0.1:19433/metrics >"$OUT/metrics-$1.txt"
  curl -s 127.0.0.1:19433/debug/state >"$OUT/state-$1.json"
  nvidia-smi --query-gpu=utilization.gpu,utilization.memory,power.draw,memory.used,clocks.sm --format=csv,noheader,nounits >"$OUT/smi-$1.txt"
  wait $lpid
}
curl -s 127.0.0.1:19433/metrics >"$OUT/metrics-idle.txt"
nvidia-smi --query-gpu=utilization.gpu,utilization.memory,power.draw,memory.used,clocks.sm --format=csv,noheader,nounits >"$OUT/smi-idle.txt"
load gemm 'a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
while time.time() < t_end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize()'
load tiny 'x = torch.ones(16, device="cuda")
while time.time() < t_end:
    for _ in range(1000): x.add_(1.0)
    torch.cuda.synchronize()'
grep -E 'goodput_exporter_poll_duration_seconds_(sum|count)|process_cpu_seconds_total|process_resident' "$OUT/metrics-tiny.txt" >"$OUT/cost.txt"
kill $DPID; wait $DPID 2>/dev/null

# GPM as an unprivileged user (the question docs/profiling.md must answer from a real run).
useradd -M -s /bin/sh goodputtest 2>/dev/null
cat >/tmp/gpm_probe.py <<'PYEOF'
import os, time, pynvml as n
print("uid", os.getuid())
try:
    n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0)
    print("init ok; support", n.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    s1 = n.nvmlGpmSampleAlloc(); s2 = n.nvmlGpmSampleAlloc()
    n.nvmlGpmSampleGet(h, s1); time.sleep(1); n.nvmlGpmSampleGet(h, s2)
    m = n.c_nvmlGpmMetricsGet_t(); m.version = n.NVML_GPM_METRICS_GET_VERSION; m.numMetrics = 1
    m.sample1, m.sample2 = s1, s2; m.metrics[0].metricId = 2
    n.nvmlGpmMetricsGet(m); print("SM_UTIL ret", m.metrics[0].nvmlReturn, "value", m.metrics[0].value)
    print("energy mJ", n.nvmlDeviceGetTotalEnergyConsumption(h))
except n.NVMLError as e:
    print("NVMLError", e.value, e)
PYEOF
chmod 644 /tmp/gpm_probe.py
{ echo "== root"; $PY /tmp/gpm_probe.py
  echo "== unprivileged user"; runuser -u goodputtest -- env PYTHONPATH="$PYTHONPATH" $PY /tmp/gpm_probe.py
} >"$OUT/gpm_privileges.txt" 2>&1
ls -la "$OUT"
