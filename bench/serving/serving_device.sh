#!/usr/bin/env bash
# [serving-truth] on a lent GPU, in one call (the machine has no network and forgets built
# trees when it goes idle): build llama-server with CUDA from the carried llama.cpp source
# (.llama/llsrc.tgz, made from the llama-cpp-python sdist), write a random-weight GGUF, serve
# it, and run bench/gpu/diagnosis.py's serving row: the exporter on real NVML and GPM scrapes the
# engine (attributed by process), clients with known token counts drive bursts.
#
#   OUT=/some/dir bench/serving/serving_device.sh      # carry: [".whl", ".llama"]
# Then bench/serving/serving_equality.py: complete requests, the exporter's totals against the
# clients'. Knobs: DIM (2048), LAYERS (16), SLOTS (8), BURSTS ("3:1,3,8"), JOBS (16),
# DIAG (1), EQUALITY (1), EQ_REQUESTS (64), EQ_N_PREDICT (512).
set -u
OUT=${OUT:?set OUT}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.." || exit 1
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH=/opt/torch/.venv/bin:$PATH PYTHONUNBUFFERED=1
LOG=$OUT/serving_device.log
START=$(date +%s)
say() { echo "[serving_device $(( $(date +%s) - START ))s] $*" | tee -a "$LOG"; }

$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >>"$LOG" 2>&1
export PYTHONPATH=/tmp/site:$PWD
if [ -x /tmp/llb/bin/llama-server ]; then
  say "reusing /tmp/llb (machine still warm)"
else
rm -rf /tmp/llsrc && tar xzf .llama/llsrc.tgz -C /tmp
say "cmake configure"
cmake -S /tmp/llsrc -B /tmp/llb -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF \
  >>"$LOG" 2>&1 || { say "configure FAILED"; tail -30 "$LOG"; exit 1; }
say "build llama-server"
cmake --build /tmp/llb --target llama-server -j "${JOBS:-16}" >>"$LOG" 2>&1 \
  || { say "build FAILED"; tail -40 "$LOG"; exit 1; }
say "built: $(ls -la /tmp/llb/bin/llama-server)"
fi
[ -f /tmp/model.gguf ] || $PY -m bench.serving.gguf_random /tmp/model.gguf --gguf-py /tmp/llsrc/gguf-py --dim "${DIM:-2048}" \
  --layers "${LAYERS:-16}" | tee -a "$LOG"
/tmp/llb/bin/llama-server -m /tmp/model.gguf --host 127.0.0.1 --port 8080 -ngl 99 --metrics \
  -np "${SLOTS:-8}" -c $(( ${SLOTS:-8} * 2048 )) >/tmp/llama-server.log 2>&1 &
LLAMA=$!
get() { $PY -c 'import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=2).read().decode())' "$1" 2>/dev/null; }
for _ in $(seq 1 120); do
  get http://127.0.0.1:8080/health | grep -q '"ok"' && break
  sleep 1
done
say "llama-server: $(get http://127.0.0.1:8080/health)"
if [ "${DIAG:-1}" = 1 ]; then
timeout -k 10 "${DIAG_LIMIT:-200}" $PY -m bench.gpu.diagnosis --out "$OUT" --workloads serving \
  --seconds "${SECONDS_PER_ROW:-30}" --budget 150 --raw --llama-url http://127.0.0.1:8080 \
  --llama-metrics --bursts "${BURSTS:-3:1,3,8}" --daemon-args=--extended-metrics \
  2>&1 | tee -a "$LOG"
fi
if [ "${EQUALITY:-1}" = 1 ]; then
  say "totals check: complete requests, exporter on real NVML/GPM"
  timeout -k 10 "${EQ_LIMIT:-150}" $PY -m bench.serving.serving_equality --llama-url http://127.0.0.1:8080 \
    --out "$OUT" --requests "${EQ_REQUESTS:-64}" --concurrency "${SLOTS:-8}" \
    --n-predict "${EQ_N_PREDICT:-512}" 2>&1 | tail -3 | tee -a "$LOG"
fi
get http://127.0.0.1:8080/metrics > "$OUT/llama-metrics.txt"
kill "$LLAMA" 2>/dev/null
{ echo "# --- llama-server log (tail)"; tail -n 30 /tmp/llama-server.log; } >>"$LOG"
say "done"
