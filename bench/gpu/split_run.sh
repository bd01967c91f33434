#!/usr/bin/env bash
# [split] validation in one device call on a 4-GPU machine (issue 46), within the device
# tool's 8 files back: bench/gpu/split.py's plan (two 2-GPU jobs at once on GPUs 0,1 and 2,3,
# one-GPU loads beside them), and, with BUILD_LLAMA=1, llama-server built with CUDA from the
# carried source (.llama/llsrc.tgz) in the background meanwhile, stripped and compressed into
# $OUT so a later call can serve with it (bench/serving/split_serving.sh).
#
#   OUT=/some/dir PLAN=explore bench/gpu/split_run.sh          # carry: [".whl", ".llama"]
#
# Writes to $OUT: gpus.txt, split.json, split.md, logs.txt and, with BUILD_LLAMA,
# llama-server.xz.aa (.ab: 15 MiB parts) and llama-build.log; with SERVING=1, then
# bench/serving/split_serving.sh (llama-server over GPUs 0,1; SERVING_BG=1: at the same time as
# the plan's first slot, which then must use GPUs 2,3, the next slots waiting for it: PLAN=side). Knobs: PLAN (empty: no rows),
# SLOTS, STEADY (30), SKIP (5), MINUTE (1: the bursty row 60 s), DAEMON_ARGS,
# NCCL_INTERVAL (1: the daemon asks NCCL's RAS for its collective counts every second,
# --nccl-interval; empty: the flag is not passed),
# LIMIT (seconds for the bench, 420), BUILD_DEADLINE (seconds since start, 430).
set -u
OUT=${OUT:?set OUT to the output directory}
cd "$(dirname "$0")/../.." || exit 1
START=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
{ date -u; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nproc; } >"$OUT/gpus.txt" 2>&1
: >"$OUT/logs.txt"
BUILD=
if [ -n "${BUILD_LLAMA:-}" ] && [ -f .llama/llsrc.tgz ]; then
  (
    rm -rf /tmp/llsrc && tar xzf .llama/llsrc.tgz -C /tmp
    cmake -S /tmp/llsrc -B /tmp/llb -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA_FA=OFF \
      -DGGML_CUDA_NCCL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF \
      && nice -n 10 cmake --build /tmp/llb --target llama-server -j "${JOBS:-40}" \
      && strip /tmp/llb/bin/llama-server && xz -T16 -6 -c /tmp/llb/bin/llama-server \
      | split -b 15M - "$OUT/llama-server.xz." \
      && echo "llama-built $(( $(date +%s) - START ))s"
  ) >"$OUT/llama-build.log" 2>&1 &
  BUILD=$!
fi
rm -rf /tmp/split && mkdir -p /tmp/split
SERVE=
GATE=()
if [ -n "${SERVING_BG:-}" ]; then  # llama-server on GPUs 0,1 beside the plan's first slot
  rm -f /tmp/serving.done
  ( OUT=$OUT bash bench/serving/split_serving.sh >/dev/null 2>&1; touch /tmp/serving.done ) &
  SERVE=$!
  GATE=(--gate /tmp/serving.done)
fi
if [ -n "${PLAN-explore}" ]; then
SLOTARG=()
[ -n "${SLOTS:-}" ] && SLOTARG=(--slots "$SLOTS")
NCCL_INTERVAL=${NCCL_INTERVAL-1}
DARGS="${NCCL_INTERVAL:+--nccl-interval $NCCL_INTERVAL }${DAEMON_ARGS:-}"
timeout -k 10 "${LIMIT:-420}" python3 -m bench.gpu.split --out /tmp/split --plan "${PLAN-explore}" \
  "${SLOTARG[@]}" "${GATE[@]}" --seconds "${STEADY:-30}" --skip "${SKIP:-5}" ${MINUTE:+--bursty-minute} \
  ${DARGS:+"--daemon-args=$DARGS"} \
  >>"$OUT/logs.txt" 2>&1
echo "[split_run] bench rc $? at $(( $(date +%s) - START ))s" >>"$OUT/logs.txt"
cp /tmp/split/split.json /tmp/split/split.md "$OUT/" 2>/dev/null
{ echo "== daemon.log (tail)"; tail -n 30 /tmp/split/daemon.log; echo "== split-logs.txt (errors)";
  grep -i "error\|traceback" /tmp/split/split-logs.txt | tail -n 30; } >>"$OUT/logs.txt" 2>&1
fi
if [ -n "$BUILD" ]; then
  while kill -0 "$BUILD" 2>/dev/null && [ $(( $(date +%s) - START )) -lt "${BUILD_DEADLINE:-430}" ]; do
    sleep 2
  done
  kill -0 "$BUILD" 2>/dev/null && { echo "llama build not done in time" >>"$OUT/llama-build.log"; kill "$BUILD"; }
  tail -n 5 "$OUT/llama-build.log"
  ls -la "$OUT"/llama-server.xz.* 2>/dev/null
fi
if [ -n "$SERVE" ]; then
  wait "$SERVE"
  tail -n 12 "$OUT/serving.log"
fi
if [ -n "${SERVING:-}" ]; then
  OUT=$OUT bash bench/serving/split_serving.sh
fi
cat "$OUT/split.md" 2>/dev/null
tail -n 40 "$OUT/logs.txt"
