#!/usr/bin/env bash
# [lost] validation in one device call on a 4-GPU machine (issue 42), within the device tool's
# 8 files back: the eight report rows (bench/gpu/jobs.py, 20 s steady), the two persistent
# stragglers again with 35 s steady (naming needs 10 s of evidence, so short rows under-count
# it), then, when TWONODE is set, one 4-GPU job across two daemons that own GPUs 0,1 and 2,3
# (bench/gpu/twonode_job.py, a real Prometheus at .carry/prometheus.gz).
#
#   OUT=/some/dir bench/gpu/lost_run.sh              # rows (~8 minutes)
#   TWONODE=1 ROWS= OUT=/some/dir bench/gpu/lost_run.sh   # the two-daemon run only (~2 minutes)
#
# Writes to $OUT: gpus.txt, rows.json, long.json, lost.md (the report of both), logs.txt and,
# with TWONODE, twonode.json.
set -u
OUT=${OUT:?set OUT to the output directory}
ROWS=${ROWS-rotating,pipeline_gpipe,late_joiner,balanced,comm_heavy,back_to_back}
LONG=${LONG-straggler_10pct,host_stall}
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version --format=csv; } \
  >"$OUT/gpus.txt" 2>&1
: >"$OUT/logs.txt"
jobs_run() {  # name rows seconds limit
  [ -n "$2" ] || return 0
  rm -rf "/tmp/lost-$1" && mkdir -p "/tmp/lost-$1"
  timeout "$4" python3 -m bench.gpu.jobs --out "/tmp/lost-$1" --rows "$2" --seconds "$3" \
    --skip 10 --ready-timeout 60 --modes slurm,process >>"$OUT/logs.txt" 2>&1
  echo "[lost_run] $1: rc $?" >>"$OUT/logs.txt"
  cp "/tmp/lost-$1/jobs.json" "$OUT/$1.json" 2>/dev/null
  for f in /tmp/lost-"$1"/*.log /tmp/lost-"$1"/jobs-logs.txt; do
    [ -f "$f" ] && { echo "== $f"; tail -n 40 "$f"; } >>"$OUT/logs.txt"
  done
}
jobs_run rows "$ROWS" 20 330
jobs_run long "$LONG" 35 150
reports=$(ls "$OUT"/rows.json "$OUT"/long.json 2>/dev/null)
[ -n "$reports" ] && python3 -m bench.gpu.lost_report $reports >"$OUT/lost.md" 2>>"$OUT/logs.txt"
if [ -n "${TWONODE:-}" ]; then
  gunzip -c .carry/prometheus.gz >/tmp/prometheus && chmod +x /tmp/prometheus
  rm -rf /tmp/two
  timeout 200 python3 -m bench.gpu.twonode_job --out /tmp/two --devices-a 0,1 --devices-b 2,3 \
    --seconds 60 --prometheus /tmp/prometheus >>"$OUT/logs.txt" 2>&1
  echo "[lost_run] twonode: rc $?" >>"$OUT/logs.txt"
  cp /tmp/two/twonode-job.json "$OUT/twonode.json" 2>/dev/null
fi
cat "$OUT/lost.md" 2>/dev/null
tail -n 30 "$OUT/logs.txt"
