#!/usr/bin/env bash
# [split] llama-server over two GPUs in its own multi-GPU mode, on a lent machine (issue 46):
# the binary built by bench/gpu/split_run.sh (BUILD_LLAMA=1: .llbin/llama-server.xz.aa, .ab),
# a random-weight GGUF (bench/serving/gguf_random.py with llama.cpp's gguf-py at .gguf-py),
# then bench/serving/split_serving.py: tokens exact against the clients, the engine's GPUs one
# job with its split on /metrics and the landing page.
#
#   OUT=/some/dir bench/serving/split_serving.sh       # carry the folder holding .llbin, .gguf-py
# Writes serving-split.json, landing.html and serving.log to $OUT. Knobs: GPUS (0,1),
# SM (layer), REQUESTS (128), N_PREDICT (512), LLAMA_SLOTS (8), LIMIT (150).
set -u
OUT=${OUT:?set OUT}
cd "$(dirname "$0")/../.." || exit 1
export PYTHONUNBUFFERED=1 CUDA_DEVICE_ORDER=PCI_BUS_ID
export PYTHONPATH=/tmp/site:$PWD
LOG=$OUT/serving.log
START=$(date +%s)
say() { echo "[split_serving $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }
[ -x /tmp/llama-server ] || { cat .llbin/llama-server.xz.* | xz -d >/tmp/llama-server && chmod +x /tmp/llama-server; }
[ -f /tmp/model.gguf ] || python3 -m bench.serving.gguf_random /tmp/model.gguf --gguf-py .gguf-py \
  --dim "${DIM:-2048}" --layers "${LAYERS:-16}" >>"$LOG" 2>&1
say "model: $(ls -la /tmp/model.gguf)"
CUDA_VISIBLE_DEVICES=${GPUS:-0,1} /tmp/llama-server -m /tmp/model.gguf --host 127.0.0.1 --port 8080 \
  -ngl 99 -sm "${SM:-layer}" -ts 1,1 -fa off --metrics -np "${LLAMA_SLOTS:-8}" -c $(( ${LLAMA_SLOTS:-8} * 2048 )) \
  >/tmp/llama-server.log 2>&1 &
LLAMA=$!
get() { python3 -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=2).read().decode())' "$1" 2>/dev/null; }
for _ in $(seq 1 90); do
  get http://127.0.0.1:8080/health | grep -q '"ok"' && break
  sleep 1
done
say "llama-server: $(get http://127.0.0.1:8080/health)"
grep -i "split\|device\|CUDA[0-9]\|offload" /tmp/llama-server.log | head -n 20 >>"$LOG"
timeout -k 10 "${LIMIT:-150}" python3 -m bench.serving.split_serving --llama-url http://127.0.0.1:8080 \
  --gpus "${GPUS:-0,1}" --out "$OUT" --requests "${REQUESTS:-128}" --concurrency "${LLAMA_SLOTS:-8}" \
  --n-predict "${N_PREDICT:-512}" 2>&1 | tail -n 3 | tee -a "$LOG"
say "serving rc ${PIPESTATUS[0]}"
kill "$LLAMA" 2>/dev/null
{ echo "# --- llama-server log (tail)"; tail -n 15 /tmp/llama-server.log; echo "# --- daemon (tail)";
  tail -n 15 "$OUT/serving-split-daemon.log"; } >>"$LOG" 2>&1
rm -f "$OUT/serving-split-daemon.log"
say "done"
