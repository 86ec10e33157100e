#!/usr/bin/env bash
# P gateway processes sharing one port with REUSEPORT=1 in front of one
# mockai (ws://, pool off), measured with wsbench. Run from the repo root
# after `make build`:
#
#   P=2 MODE=hold N=14000 bash bench/scaleout/procs.sh   # sessions held
#   P=4 MODE=calls N=2000 bash bench/scaleout/procs.sh   # CPU per relayed message
#
# hold: wsbench -hold N; prints each process's sessions, RSS and fds while held.
# calls: wsbench -n N -c C -audio (1 s of 20 ms audio chunks per call); prints
# the gateways' CPU (sum over processes, from /metrics) per relayed frame.
# Everything runs on loopback and is stopped by PID at the end.
set -u
B=${B:-bin}
P=${P:-2}; MODE=${MODE:-hold}; N=${N:-14000}; C=${C:-200}; PORT=${PORT:-4301}
OUT=${OUT:-$(mktemp -d)}
$B/mockai -addr 127.0.0.1:8391 > "$OUT/mock.log" 2>&1 & MOCK=$!
sleep 0.5
pids=()
for i in $(seq 1 "$P"); do
  REUSEPORT=1 LITELLM_MASTER_KEY=sk-local OPENAI_API_KEY=sk-mock OPENAI_API_BASE=ws://127.0.0.1:8391/v1 \
  PORT=$PORT ADMIN_ADDR=127.0.0.1:$((4400+i)) REALTIME_POOL_SIZE=0 LOG_LEVEL=warn $B/gateway > "$OUT/gw$i.log" 2>&1 &
  pids+=($!)
done
sleep 1
metric() { curl -s "127.0.0.1:$((4400+$1))/metrics" | awk -v n="$2" '$1==n{s+=$2} END{printf "%.6f", s}'; }
frames() { curl -s "127.0.0.1:$((4400+$1))/metrics" | awk '/^rtgate_relay_frames_total/{s+=$2} END{printf "%.0f", s}'; }
if [ "$MODE" = hold ]; then
  $B/wsbench -host 127.0.0.1:$PORT -insecure -key sk-local -hold "$N" -hold-for "${HOLD:-20s}" -c "$C" -quiet > "$OUT/wsbench.md" 2> "$OUT/wsbench.err" &
  WS=$!
  for t in $(seq 1 150); do
    sleep 2
    line="t=$((t*2))s"
    for i in $(seq 1 "$P"); do
      s=$(metric "$i" rtgate_sessions_open); r=$(metric "$i" process_resident_memory_bytes)
      line="$line gw$i: sessions=${s%.*} rss=$(( ${r%.*} / 1048576 ))MiB fds=$(ls /proc/${pids[$((i-1))]}/fd | wc -l)"
    done
    echo "$line"
    kill -0 $WS 2>/dev/null || break
  done
  wait $WS
else
  cpu0=0; for i in $(seq 1 "$P"); do cpu0=$(echo "$cpu0 + $(metric "$i" process_cpu_seconds_total)" | bc); done
  $B/wsbench -host 127.0.0.1:$PORT -insecure -key sk-local -n "$N" -c "$C" -audio -quiet > "$OUT/wsbench.md" 2> "$OUT/wsbench.err"
  sleep 1
  cpu1=0; fr=0
  for i in $(seq 1 "$P"); do
    cpu1=$(echo "$cpu1 + $(metric "$i" process_cpu_seconds_total)" | bc); fr=$((fr + $(frames "$i")))
    echo "gw$i: frames=$(frames "$i") cpu_s=$(metric "$i" process_cpu_seconds_total)"
  done
  echo "processes=$P calls=$N frames=$fr gateway_cpu_s=$(echo "$cpu1 - $cpu0" | bc) cpu_us_per_frame=$(echo "scale=2; ($cpu1 - $cpu0) * 1000000 / $fr" | bc)"
fi
kill "${pids[@]}" $MOCK; wait 2>/dev/null
cat "$OUT/wsbench.md"; tail -3 "$OUT/wsbench.err"
echo "files: $OUT"
