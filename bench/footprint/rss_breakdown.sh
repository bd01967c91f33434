#!/usr/bin/env bash
# Where the daemon's resident memory goes on a GPU node: anonymous (our heap) versus
# file-backed (shared libraries such as libnvidia-ml), with and without MALLOC_ARENA_MAX=2.
# Usage: OUT=dir bench/footprint/rss_breakdown.sh   (writes $OUT/rss_breakdown.txt)
set -u
OUT=${OUT:-/tmp}; PY=${PYTHON:-python3}
for env in "DEFAULT=1" "MALLOC_ARENA_MAX=2"; do
  env $env PYTHONPATH="${PYTHONPATH:-}:$PWD" $PY -m exporter --listen 127.0.0.1:19439 >/dev/null 2>&1 &
  pid=$!
  sleep 25
  for _ in 1 2 3 4 5; do curl -s -o /dev/null 127.0.0.1:19439/metrics; done
  sleep 5
  {
    echo "== $env (pid $pid)"
    grep -E 'Rss|Pss_(Anon|File)' /proc/$pid/smaps_rollup
    echo "-- largest mappings by Rss (kB)"
    awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{rss[name]+=$2} END{for (n in rss) print rss[n], n}' \
      /proc/$pid/smaps | sort -rn | head -12
  } >>"$OUT/rss_breakdown.txt"
  kill $pid; wait $pid 2>/dev/null
done
