#!/usr/bin/env bash
# The cold first burst, two gateway builds side by side (issue 25): for a
# noisy, shared box, where `make bench`'s legs run one after the other and
# each meets a different load. Each trial starts one mockai and two fresh
# gateways (REALTIME_POOL_SIZE=auto, cold), then runs three bursts of -c
# calls AT THE SAME TIME: direct to mockai, through gateway A, through
# gateway B. All three meet the same noise, so the per-trial ratios against
# direct compare A and B (the absolute figures, and the ratios' level, are
# those of three bursts sharing the cores: use `make bench` on a quiet box
# for the real figure). Prints, per trial, total p50/p95/p99 against direct
# and the session phase's p99, then the medians.
#
#   make build && go build -o /tmp/old/ ./cmd/gateway   # (at the old commit)
#   A=/tmp/old/gateway B=bin/gateway bash bench/burstab.sh
#   UPSTREAM=tls TRIALS=8 A=... B=... bash bench/burstab.sh
set -euo pipefail
BIN=${BIN:-bin}
A=${A:?gateway binary A}
B=${B:?gateway binary B}
TRIALS=${TRIALS:-6}
CALLS=${CALLS:-200}
UPSTREAM=${UPSTREAM:-plain}
MOCK_PORT=${MOCK_PORT:-28289}
out=$(mktemp -d)
# pct FILE Q: the Q quantile of the ok calls' FIELD (default total_ms).
pct() { jq "[.samples[] | select(.ok) | .${3:-total_ms}] | sort | .[((length - 1) * $2 | floor)]" "$1"; }
for t in $(seq "$TRIALS"); do
	d=$out/t$t
	mkdir -p "$d"
	scheme=ws
	extra=()
	if [ "$UPSTREAM" = tls ]; then
		scheme=wss
		extra=(-tls -cert-out "$d/ca.pem")
	fi
	"$BIN/mockai" -addr "127.0.0.1:$MOCK_PORT" -upgrade-delay 150ms -session-delay 7ms -first-audio-delay 400ms \
		-deltas 25 -delta-interval 40ms -key sk-mock "${extra[@]}" >/dev/null 2>&1 &
	pids=($!)
	sleep 0.3
	base=$scheme://127.0.0.1:$MOCK_PORT/v1
	ca=()
	[ "$UPSTREAM" = tls ] && ca=(UPSTREAM_CA_FILE="$d/ca.pem")
	i=0
	for gw in "$A" "$B"; do
		i=$((i + 1))
		env LITELLM_MASTER_KEY=sk-master OPENAI_API_KEY=sk-mock OPENAI_API_BASE="$base" OPENAI_REALTIME_MODEL=gpt-realtime \
			LOG_LEVEL=warn HOST=127.0.0.1 PORT=$((MOCK_PORT + 10 * i)) ADMIN_ADDR=127.0.0.1:$((MOCK_PORT + 10 * i + 1)) \
			REALTIME_POOL_SIZE=auto "${ca[@]}" "$gw" >/dev/null 2>&1 &
		pids+=($!)
	done
	for i in 1 2; do
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:$((MOCK_PORT + 10 * i))/health" >/dev/null && break; sleep 0.1; done
	done
	sleep 0.5 # the pools at their floor (MIN 2): a cold start
	caflag=()
	[ "$UPSTREAM" = tls ] && caflag=(-ca "$d/ca.pem")
	"$BIN/wsbench" -host "$base/realtime" -key sk-mock "${caflag[@]}" -n "$CALLS" -c "$CALLS" -quiet -json "$d/direct.json" >/dev/null 2>&1 &
	w=($!)
	for i in 1 2; do
		WSBENCH_KEY=sk-master "$BIN/wsbench" -host "ws://127.0.0.1:$((MOCK_PORT + 10 * i))/v1/realtime" -n "$CALLS" -c "$CALLS" \
			-quiet -json "$d/gw$i.json" >/dev/null 2>&1 &
		w+=($!)
	done
	wait "${w[@]}" || true
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || true
	line="trial $t:"
	for i in 1 2; do
		ab=$( [ $i = 1 ] && echo A || echo B)
		r=$(for q in 0.5 0.95 0.99; do
			jq -n --argjson g "$(pct "$d/gw$i.json" $q)" --argjson x "$(pct "$d/direct.json" $q)" '($g / $x - 1) * 1000 | round / 10'
		done | paste -sd' ')
		echo "$r" >>"$out/$ab.txt"
		line+=" $ab ${r// //}% (session p99 $(pct "$d/gw$i.json" 0.99 session_ms | cut -d. -f1) ms)"
	done
	echo "$line"
done
# median COLUMN FILE
median() { cut -d' ' -f"$1" "$2" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for ab in A B; do
	echo "median $ab vs direct: p50 $(median 1 "$out/$ab.txt")% p95 $(median 2 "$out/$ab.txt")% p99 $(median 3 "$out/$ab.txt")%"
done
rm -rf "$out"
