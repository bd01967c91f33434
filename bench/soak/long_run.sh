#!/usr/bin/env bash
# Ten minutes of the daemon on a GPU node, scraped every 15 s like a Prometheus would:
# RSS (and its anonymous/file split) and CPU share every minute. Two phases so it fits the
# device tool's 10-minute command limit:
#   bench/soak/long_run.sh start            # starts daemon + sampler in their own session, returns
#   OUT=dir bench/soak/long_run.sh collect  # waits until 10 minutes have passed, copies results
set -u
DIR=/tmp/goodput-long-run
PY=${PYTHON:-python3}
case "${1:-}" in
start)
  rm -rf "$DIR"; mkdir -p "$DIR"
  setsid env PYTHONPATH="${PYTHONPATH:-}:$PWD" $PY -m exporter --listen 127.0.0.1:19440 ${EXPORTER_ARGS:-} \
    >"$DIR/daemon.log" 2>&1 < /dev/null &
  echo $! >"$DIR/pid"; date +%s >"$DIR/started"
  setsid bash -c '
    pid=$(cat '"$DIR"'/pid); start=$(cat '"$DIR"'/started); hz=$(getconf CLK_TCK)
    echo "minute rss_kb anon_kb file_kb cpu_seconds cpu_percent_of_core" >'"$DIR"'/samples.txt
    for minute in $(seq 0 '"${MINUTES:-10}"'); do
      while [ $(( $(date +%s) - start )) -lt $(( minute * 60 )) ]; do
        curl -s -o /dev/null 127.0.0.1:19440/metrics; sleep 15
      done
      read -r -a st < /proc/$pid/stat
      cpu=$(( ${st[13]} + ${st[14]} ))
      rss=$(awk "/^Rss:/{print \$2}" /proc/$pid/smaps_rollup)
      anon=$(awk "/^Pss_Anon:/{print \$2}" /proc/$pid/smaps_rollup)
      file=$(awk "/^Pss_File:/{print \$2}" /proc/$pid/smaps_rollup)
      el=$(( $(date +%s) - start ))
      awk -v m=$minute -v r=$rss -v a=$anon -v f=$file -v c=$cpu -v hz=$hz -v el=$el \
        "BEGIN{printf \"%d %d %d %d %.2f %.3f\\n\", m, r, a, f, c/hz, 100*c/hz/(el+0.001)}" \
        >>'"$DIR"'/samples.txt
    done
    touch '"$DIR"'/done' >/dev/null 2>&1 < /dev/null &
  echo "started daemon $(cat $DIR/pid)"
  ;;
collect)
  OUT=${OUT:?}
  while [ ! -f "$DIR/done" ]; do sleep 5; done
  kill "$(cat $DIR/pid)"; sleep 1
  cp "$DIR/samples.txt" "$DIR/daemon.log" "$OUT/"
  cat "$OUT/samples.txt"
  ;;
*) echo "usage: $0 start|collect" >&2; exit 2 ;;
esac
