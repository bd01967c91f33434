#!/usr/bin/env bash
# One call on a lent GPU machine (H100/H200, one or two GPUs, no network): installs the carried
# wheels (.whl/: structlog, pydantic and friends, bcrypt, nvitop, nvitop-exporter, and grpcio +
# protobuf for the kubelet stand-in), records the GPUs, then runs bench/gpu/diagnosis.py ([diagnosis]
# workloads, per-window verdicts) and bench/footprint/side_by_side.py ([footprint]: this exporter vs
# nvitop-exporter, 1 s then 15 s scrapes). Each step has a hard time limit; the whole run stays
# under ~9 minutes.
#
# On 2+ GPUs diagnosis.py serves one pod holding every GPU on a kubelet stand-in
# (bench/gpu/pod_standin.py) and starts the daemon with --kubernetes against it, so the all-reduce
# rows get the job-level verdicts (goodput_job_straggler, comm_wait) and a PASS/FAIL job check
# each. That needs grpcio and protobuf for cp312 in .whl/ (same versions as the dev venv):
#   python -m pip download --dest .whl --python-version 3.12 --only-binary=:all: --no-deps \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux_2_28_x86_64 grpcio==1.85.3 protobuf==7.36.2
# Without them the run goes on and the job checks FAIL with "pod attribution missing".
#
#   OUT=/some/dir bench/gpu/device_run.sh                         # from the repository root
#   LLAMA_URL=http://127.0.0.1:8080 OUT=... bench/gpu/device_run.sh   # adds the serving row
#   LLAMA_START="llama/build/bin/llama-server -m m.gguf --port 8080 -ngl 99 --metrics -np 8" LLAMA_URL=... \
#     OUT=... bench/gpu/device_run.sh                             # starts llama-server first
#
# Writes at most 8 flat files to $OUT: nvidia-smi.txt, device_run.log, diagnosis.json,
# diagnosis.md, diagnosis-logs.txt, side_by_side.json, side_by_side.md, side_by_side-logs.txt
# (TRANSFERS and WORKLOADS_SMOKE add three each, JOBS six: skip a step to stay within 8).
# Knobs (environment): DIAG_SECONDS (20), DIAG_BUDGET (~250), DIAG_ARGS, SBS_PHASES (1:90,15:90),
# SBS_ARGS, SKIP_SBS (set: no side_by_side.py), SKIP_DIAG (set: no diagnosis.py), JOBS (set:
# bench/gpu/jobs.py first; JOBS_LIMIT (540), JOBS_ARGS), TRANSFERS
# (set: bench/gpu/transfers.py first, writing transfers.json/.md/-logs.txt), TRANSFERS_LIMIT (330),
# TRANSFERS_ARGS, WORKLOADS_SMOKE (set: first, every workload for a few seconds through
# `python -m bench.gpu.workloads`, writing workloads-smoke.json/.md/-logs.txt; SMOKE_LIMIT (300),
# SMOKE_ARGS), PYTHON (python3).
set -u
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
# NVLink multicast stays off in NCCL, PyTorch and NVSHMEM for every process started below.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
PY=${PYTHON:-python3}
LOG=$OUT/device_run.log
START=$(date +%s)
say() { echo "[device_run $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || say "wheel install FAILED (see above)"
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
say "wheels: $(ls .whl 2>/dev/null | tr '\n' ' ')"

{
  nvidia-smi
  nvidia-smi topo -m
  nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  $PY - <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
print("python", sys.version.split()[0])
for name in ("torch", "cupy-cuda13x", "nvidia-ml-py", "prometheus-client", "aiohttp", "structlog",
             "pydantic", "pydantic-core", "PyYAML", "bcrypt", "psutil", "grpcio", "protobuf",
             "nvitop", "nvitop-exporter"):
    try:
        print(name, version(name))
    except PackageNotFoundError:
        print(name, "MISSING")
EOF
} >"$OUT/nvidia-smi.txt" 2>&1
say "GPUs: $(nvidia-smi -L 2>&1 | tr '\n' ';')"

LLAMA_PID=
if [ -n "${LLAMA_START:-}" ]; then
  setsid bash -c "$LLAMA_START" >/tmp/llama-server.log 2>&1 </dev/null &
  LLAMA_PID=$!
  health() { $PY -c 'import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=2).read()[:200].decode())' \
    "${LLAMA_URL:-http://127.0.0.1:8080}/health" 2>&1 | tail -n 1; }
  for _ in $(seq 1 120); do  # up to ~2 minutes to load the model
    health | grep -q '"ok"' && break
    sleep 1
  done
  say "llama-server: $(health)"
fi

# Every workload for a few seconds through the one entry point (no daemon): does each family
# still run on this GPU? On when WORKLOADS_SMOKE is set.
if [ -n "${WORKLOADS_SMOKE:-}" ]; then
  say "workloads smoke (limit ${SMOKE_LIMIT:-300}s)"
  timeout -k 15 "${SMOKE_LIMIT:-300}" $PY -m bench.gpu.workloads.smoke --out "$OUT" \
    ${LLAMA_URL:+--url "$LLAMA_URL"} ${SMOKE_ARGS:-} 2>&1 | tee -a "$LOG"
  say "workloads smoke exit ${PIPESTATUS[0]}"
fi

# [transfers] (issue 26): pinned/pageable/throttled/overlapped/managed bus traffic, one
# process of phases next to the daemon; on when TRANSFERS is set (TRANSFERS_LIMIT seconds).
if [ -n "${TRANSFERS:-}" ]; then
  TLIMIT=${TRANSFERS_LIMIT:-330}
  say "transfers.py (limit ${TLIMIT}s)"
  timeout -k 15 "$TLIMIT" $PY -m bench.gpu.transfers --out "$OUT" --budget $(( TLIMIT - 25 )) \
    ${TRANSFERS_ARGS:-} 2>&1 | tee -a "$LOG"
  say "transfers.py exit ${PIPESTATUS[0]}"
fi
# [jobs] (issue 31): multi-GPU jobs whose ranks measure their own waiting, judged by one daemon
# per identity source (pods, Slurm, process tree) at once; on when JOBS is set (JOBS_LIMIT
# seconds; JOBS_ARGS, e.g. "--rows straggler_10pct,balanced --seconds 30"). Writes jobs.json,
# jobs.md, jobs-logs.txt and one daemon-<mode>.log per identity mode.
if [ -n "${JOBS:-}" ]; then
  JLIMIT=${JOBS_LIMIT:-540}
  say "jobs.py (limit ${JLIMIT}s)"
  timeout -k 15 "$JLIMIT" $PY -m bench.gpu.jobs --out "$OUT" ${JOBS_ARGS:-} 2>&1 | tee -a "$LOG"
  say "jobs.py exit ${PIPESTATUS[0]}"
fi
DIAG_START=$(date +%s)
[ -n "${TRANSFERS:-}${WORKLOADS_SMOKE:-}${JOBS:-}" ] || DIAG_START=$START

# diagnosis gets what is left of ~4.75 minutes (llama-server's start counts against it)
LEFT=$(( 285 - ($(date +%s) - DIAG_START) )); [ "$LEFT" -lt 90 ] && LEFT=90
BUDGET=${DIAG_BUDGET:-$(( LEFT - 35 ))}
if [ -n "${SKIP_DIAG:-}" ]; then
  say "diagnosis.py skipped (SKIP_DIAG)"
else
say "diagnosis.py (limit ${LEFT}s, budget ${BUDGET}s)"
timeout -k 15 "$LEFT" $PY -m bench.gpu.diagnosis --out "$OUT" --seconds "${DIAG_SECONDS:-20}" \
  --budget "$BUDGET" --raw ${LLAMA_URL:+--llama-url "$LLAMA_URL" --llama-metrics} ${DIAG_ARGS:-} \
  2>&1 | tee -a "$LOG"
say "diagnosis.py exit ${PIPESTATUS[0]}"
fi

if [ -n "$LLAMA_PID" ]; then
  kill -- -"$LLAMA_PID" 2>/dev/null  # its own session and process group (setsid)
  { echo "# --- llama-server log (tail)"; tail -n 40 /tmp/llama-server.log; } >>"$LOG"
fi

if [ -n "${SKIP_SBS:-}" ]; then
  say "side_by_side.py skipped (SKIP_SBS)"
else
  say "side_by_side.py"
  timeout -k 15 225 $PY -m bench.footprint.side_by_side --out "$OUT" --phases "${SBS_PHASES:-1:90,15:90}" \
    --load gemm ${SBS_ARGS:-} 2>&1 | tee -a "$LOG"
  say "side_by_side.py exit ${PIPESTATUS[0]}"
fi
ls -la "$OUT" | tee -a "$LOG"
