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
# The engine runs as a service does: in a session of its own whose leader's parent is init
# (setsid -f: the forking parent exits at once), not as a child of this script. Under
# process-session identities (no pod, no Slurm job) a session leader whose parent is not a
# daemon is taken for one of torchrun's workers and joins its parent's session, so an engine
# started with a plain setsid (or none) beside the bench's own GPU loads was one job with them.
rm -f /tmp/llama-server.pid
CUDA_VISIBLE_DEVICES=${GPUS:-0,1} setsid -f bash -c 'echo $$ >/tmp/llama-server.pid; exec "$@"' llama \
  /tmp/llama-server -m /tmp/model.gguf --host 127.0.0.1 --port 8080 \
  -ngl 99 -sm "${SM:-layer}" -ts 1,1 -fa off --metrics -np "${LLAMA_SLOTS:-8}" -c $(( ${LLAMA_SLOTS:-8} * 2048 )) \
  </dev/null >/tmp/llama-server.log 2>&1
for _ in $(seq 1 20); do [ -s /tmp/llama-server.pid ] && break; sleep 0.1; done
LLAMA=$(cat /tmp/llama-server.pid 2>/dev/null)
say "llama-server pid ${LLAMA:-?}: $(ps -o pid=,ppid=,sid=,args= -p "${LLAMA:-0}" 2>/dev/null | cut -c1-80)"
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
[ -n "$LLAMA" ] && kill "$LLAMA" 2>/dev/null
for _ in $(seq 1 50); do  # gone, or a zombie its new parent has yet to reap
  kill -0 "${LLAMA:-0}" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$LLAMA/status" 2>/dev/null || break
  sleep 0.2
done
{ echo "# --- llama-server log (tail)"; tail -n 15 /tmp/llama-server.log; echo "# --- daemon (tail)";
  tail -n 15 "$OUT/serving-split-daemon.log"; } >>"$LOG" 2>&1
rm -f "$OUT/serving-split-daemon.log"
say "done"
