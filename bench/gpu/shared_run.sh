#!/usr/bin/env bash
# [shared-gpu] validation in one device call (issue 50), GPU 0 only, every step time-bounded:
# 1. timeslice: a GEMM loop, a tiny-kernel loop and an idle memory holder time-sliced on GPU 0;
# 2. mps: the GEMM and tiny loops under an MPS control daemon started here with its own pipe
#    and log directories (no GPU setting changes; stopped at the end), if the binary exists;
# 3. llama: llama-server (CUDA, built here in the background from .llama/llsrc.tgz while 1-2
#    run) under counted client load beside a GEMM loop.
# The exporter runs on real NVML and GPM (bench/gpu/shared_gpu.py). At most 8 files to $OUT:
# gpus.txt, logs.txt, timeslice.json, mps.json, llama.json, shared.md.
#
#   OUT=/some/dir LLAMA_TGZ=../../.llama/llsrc.tgz WHL=../../.whl bench/gpu/shared_run.sh
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
rm -rf /tmp/sg
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
START=$(date +%s)
LOG=$OUT/logs.txt
say() { echo "[shared_run $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
WHL=${WHL:-.whl}
LLAMA_TGZ=${LLAMA_TGZ:-.llama/llsrc.tgz}
if ls "$WHL"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHL"/*.whl >>"$LOG" 2>&1 || say "wheel install failed"
fi
export PYTHONPATH=/tmp/site:$REPO
{ nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,compute_mode --format=csv;
  python3 -c 'import torch, pynvml; print("torch", torch.__version__)'; nproc; } \
  >"$OUT/gpus.txt" 2>&1

BUILD=""
if [ -x /tmp/llb/bin/llama-server ]; then
  say "llama-server: reusing /tmp/llb (machine still warm)"
elif [ -f "$LLAMA_TGZ" ]; then
  say "llama-server: building in the background"
  ( set -e; rm -rf /tmp/llsrc; tar xzf "$LLAMA_TGZ" -C /tmp
    cmake -S /tmp/llsrc -B /tmp/llb -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF
    nice -n 10 cmake --build /tmp/llb --target llama-server -j "${JOBS:-44}"
  ) >/tmp/llbuild.log 2>&1 &
  BUILD=$!
else
  say "no $LLAMA_TGZ: the llama step is skipped"
fi

SIM=${SIMULATE:+--simulate}  # SIMULATE=1: no GPU, the plumbing only (dry workloads)
say "timeslice: GEMM, tiny kernels, idle holder on GPU 0"
timeout -k 5 "${TS_LIMIT:-80}" python3 -m bench.gpu.shared_gpu --scenario timeslice --out /tmp/sg \
  --seconds "${TS_SECONDS:-25}" $SIM >>"$LOG" 2>&1
say "timeslice: rc $?"
cp /tmp/sg/timeslice.json "$OUT/" 2>/dev/null

MPSC=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control \
  /usr/local/cuda/bin/nvidia-cuda-mps-control /usr/bin/nvidia-cuda-mps-control 2>/dev/null | head -n 1)
if [ -n "$MPSC" ] && [ -z "$SIM" ]; then
  say "mps: starting a control daemon (pipe/log under /tmp, GPU 0, no GPU setting changed)"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if CUDA_VISIBLE_DEVICES=0 timeout 10 "$MPSC" -d >>"$LOG" 2>&1; then
    timeout -k 5 "${MPS_LIMIT:-65}" python3 -m bench.gpu.shared_gpu --scenario mps --out /tmp/sg \
      --seconds "${MPS_SECONDS:-15}" >>"$LOG" 2>&1
    say "mps: rc $?"
    { echo "# --- MPS control log"; tail -n 20 /tmp/mps-log/control.log;
      echo "# --- MPS server log"; tail -n 20 /tmp/mps-log/server.log; } >>"$LOG" 2>&1
    echo quit | timeout 10 "$MPSC" >>"$LOG" 2>&1
    sleep 2
    say "mps: control daemon stopped"
  else
    say "mps: the control daemon did not start"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  cp /tmp/sg/mps.json "$OUT/" 2>/dev/null
else
  say "mps: nvidia-cuda-mps-control is not on this machine (or SIMULATE)"
fi

if [ -n "$BUILD" ]; then
  DEADLINE=$(( START + ${BUILD_DEADLINE:-240} ))
  while kill -0 "$BUILD" 2>/dev/null && [ "$(date +%s)" -lt "$DEADLINE" ]; do sleep 2; done
  if kill -0 "$BUILD" 2>/dev/null; then
    say "llama-server build still running at the deadline: stopped"
    kill -- -"$BUILD" 2>/dev/null; kill "$BUILD" 2>/dev/null
  fi
  wait "$BUILD" 2>/dev/null
  say "llama-server build: $(ls /tmp/llb/bin/llama-server 2>&1)"
  tail -n 15 /tmp/llbuild.log >>"$LOG"
fi
if [ -x /tmp/llb/bin/llama-server ]; then
  [ -f /tmp/model.gguf ] || timeout 120 python3 -m bench.serving.gguf_random /tmp/model.gguf \
    --gguf-py /tmp/llsrc/gguf-py --dim "${DIM:-1024}" --layers "${LAYERS:-8}" >>"$LOG" 2>&1
  CUDA_VISIBLE_DEVICES=0 /tmp/llb/bin/llama-server -m /tmp/model.gguf --host 127.0.0.1 \
    --port 8080 -ngl 99 --metrics -np 4 -c 8192 >/tmp/llama-server.log 2>&1 &
  LLAMA=$!
  for _ in $(seq 1 60); do
    python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:8080/health", timeout=1)' \
      2>/dev/null && break
    sleep 1
  done
  say "llama: server pid $LLAMA up; GEMM beside it, counted clients"
  timeout -k 5 "${LL_LIMIT:-75}" python3 -m bench.gpu.shared_gpu --scenario llama --out /tmp/sg \
    --seconds "${LL_SECONDS:-20}" --llama-url http://127.0.0.1:8080 $SIM >>"$LOG" 2>&1
  say "llama: rc $?"
  python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:8080/metrics").read().decode())' \
    2>/dev/null | grep -E '^llamacpp:(tokens_predicted_total|n_decode_total|n_busy_slots)' >>"$LOG"
  kill "$LLAMA" 2>/dev/null
  { echo "# --- llama-server log (tail)"; tail -n 15 /tmp/llama-server.log; } >>"$LOG"
  cp /tmp/sg/llama.json "$OUT/" 2>/dev/null
fi
for f in /tmp/sg/*-daemon.log; do
  [ -f "$f" ] && { echo "# --- $f"; grep -v '"debug"' "$f" | tail -n 25; } >>"$LOG"
done
reports=$(ls "$OUT"/timeslice.json "$OUT"/mps.json "$OUT"/llama.json 2>/dev/null)
[ -n "$reports" ] && python3 -m bench.gpu.shared_report $reports >"$OUT/shared.md" 2>>"$LOG"
say "done"
cat "$OUT/shared.md" 2>/dev/null | head -60
