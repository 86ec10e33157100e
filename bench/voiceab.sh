#!/usr/bin/env bash
# The gateway's CPU on the voice row of `make bench-peers` with a setting off
# and on (issue 23: what continuity costs), alternated A B, B A, ... so that
# drift over the run meets both alike. The gateway is pinned to core 0 and
# wsbench with mockai to core 1 (`taskset`), which takes the load generator's
# own CPU out of the gateway's way; even so the figure moves by ±10 % from run
# to run of the same build on a 2-core box (docs/continuity.md:
# use the medians, and BenchmarkRelayCost for continuity's own work).
# Needs jq and taskset (util-linux).
#
#   make build && bash bench/voiceab.sh                # SESSION_CONTINUITY 0 vs 1
#   A="TURN_METRICS=0" B="TURN_METRICS=1" CYCLES=6 bash bench/voiceab.sh
set -euo pipefail
BIN=${BIN:-bin}
A=${A:-SESSION_CONTINUITY=0}
B=${B:-SESSION_CONTINUITY=1}
CYCLES=${CYCLES:-8}
SESSIONS=${SESSIONS:-200}
WINDOW=${WINDOW:-15s}
UPSTREAM=${UPSTREAM:-tls}
out=$(mktemp -d)
echo "logs: $out"
gw=$(realpath "$BIN/gateway")
printf '#!/bin/sh\nexec taskset -c 0 "%s" "$@"\n' "$gw" > "$out/gateway"
chmod +x "$out/gateway"
run() { # run NAME ENV: one voice row, its cores per 1,000 sessions
	# $2 unquoted on purpose: it may set several variables.
	env $2 taskset -c 1 "$BIN/wsbench" peers -mockai "$BIN/mockai" -gateway "$out/gateway" \
		-systems rtgate-pool-off -phases voice -upstream "$UPSTREAM" -rounds 1 \
		-voice-n "$SESSIONS" -tls-voice-n "$SESSIONS" -voice-for "$WINDOW" -out "$out/$1" > "$out/$1.log" 2>&1
	# The measurement wsbench kept (it repeats a phase that other jobs
	# disturbed, and keeps the least disturbed): say when even that one was.
	local v
	v=$(jq -r '.runs[0].voice | "\(.proxy_cores_per_1000_sessions) \(.disturbed // false)"' "$out/$1"/*/results.json)
	[ "${v#* }" = false ] || echo "$1: disturbed by other jobs (${v#* })" >&2
	printf '%.3f\n' "${v%% *}"
}
ratios=()
for c in $(seq "$CYCLES"); do
	if ((c % 2)); then a=$(run "a$c" "$A"); b=$(run "b$c" "$B"); else b=$(run "b$c" "$B"); a=$(run "a$c" "$A"); fi
	r=$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')
	ratios+=("$r")
	printf 'cycle %d: A %s, B %s cores per 1,000 sessions: B/A %.3f\n' "$c" "$a" "$b" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "median B/A over %d cycles: %.3f\n", NR, m}'
