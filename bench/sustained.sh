#!/usr/bin/env bash
# The warm pool under sustained load (issue 31's table): mockai answering
# the upgrade after 100 ms, a gateway with REALTIME_POOL_SIZE=auto, a
# warm-up of WARMUP calls at -c C, then N calls at -c C with no pause between
# them. Prints the measured run's pool hits and misses (the gateway's
# rtgate_pool_hits_total / rtgate_pool_misses_total, deltas) and its
# session phase p50/p99. Closed loop with short calls unless mockai's
# arguments make calls longer.
#
#   make build
#   bash bench/sustained.sh bin/gateway plain 50 2000
#   bash bench/sustained.sh bin/gateway plain 200 3000
#   bash bench/sustained.sh bin/gateway plain 150 2400 -deltas 50 -delta-interval 20ms
#   bash bench/sustained.sh bin/gateway tls 50 1300
#
# WARMUP (500) is the warm-up's calls. On a quiet 2-core box 500 short calls
# at 50-200 concurrent take under a second, less than the pool needs to fill
# to the load's target: 1,851-1,872 of 2,000 and 2,457-2,585 of 3,000 warm,
# the misses in the run's first part; with WARMUP=1200 every connect was
# (2026-12-04, docs/warm-pool.md, "The warm pool under sustained load").
#
# Needs curl and jq. Ports from PORTBASE (27400); BIN (bin) holds mockai and wsbench.
set -uo pipefail
GW=${1:?gateway binary}; UP=${2:?plain or tls}; C=${3:?concurrency}; N=${4:?calls}; shift 4
BIN=${BIN:-bin}
P=${PORTBASE:-27400}
d=$(mktemp -d)
extra=(); scheme=ws; ca=()
if [ "$UP" = tls ]; then extra=(-tls -cert-out "$d/ca.pem"); scheme=wss; fi
"$BIN/mockai" -addr 127.0.0.1:$P -upgrade-delay 100ms -key sk-mock "${extra[@]}" "$@" >"$d/mock.log" 2>&1 &
mp=$!
trap 'kill $gp $mp 2>/dev/null' EXIT
sleep 0.4
[ "$UP" = tls ] && ca=(UPSTREAM_CA_FILE="$d/ca.pem")
env LITELLM_MASTER_KEY=sk-master OPENAI_API_KEY=sk-mock OPENAI_API_BASE=$scheme://127.0.0.1:$P/v1 \
  LOG_LEVEL=warn HOST=127.0.0.1 PORT=$((P+1)) ADMIN_ADDR=127.0.0.1:$((P+2)) REALTIME_POOL_SIZE=auto "${ca[@]}" \
  "$GW" >"$d/gw.log" 2>&1 &
gp=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:$((P+1))/health >/dev/null && break; sleep 0.1; done
m() { curl -s http://127.0.0.1:$((P+2))/metrics | awk -v n="$1" '$1 ~ "^"n"\\{" {s+=$2} END {print s+0}'; }
WSBENCH_KEY=sk-master "$BIN/wsbench" -host ws://127.0.0.1:$((P+1))/v1/realtime -n "${WARMUP:-500}" -c "$C" -quiet >/dev/null 2>&1
h0=$(m rtgate_pool_hits_total); m0=$(m rtgate_pool_misses_total)
WSBENCH_KEY=sk-master "$BIN/wsbench" -host ws://127.0.0.1:$((P+1))/v1/realtime -n "$N" -c "$C" -quiet -json "$d/run.json" >"$d/wsbench.txt" 2>&1
h1=$(m rtgate_pool_hits_total); m1=$(m rtgate_pool_misses_total)
echo "$UP c=$C n=$N $*: hits $((h1-h0)) misses $((m1-m0)) | session p50/p99 $(jq -r '[.samples[]|select(.ok)|.session_ms]|sort|"\(.[length/2|floor]) \(.[(length-1)*0.99|floor])"' "$d/run.json") ms | ok $(jq '[.samples[]|select(.ok)]|length' "$d/run.json")"
rm -rf "$d"
