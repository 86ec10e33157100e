#!/usr/bin/env bash
# Warm sockets 4 s after start over a TLS upstream (issue 10, item 1): starts
# mockai -tls (session.created at once after the 101, both TLS records in one
# TCP segment) and a gateway with REALTIME_POOL_SIZE=16, reads
# rtgate_pool_warm_sockets from /metrics 4 s later, five times.
#
#   make build && bash bench/warm4s.sh            # prints e.g. "16 16 16 16 16"
#   BIN=/other/bin STARTS=10 bash bench/warm4s.sh
set -euo pipefail
BIN=${BIN:-bin}
STARTS=${STARTS:-5}
SIZE=${SIZE:-16}
MOCK=127.0.0.1:${MOCK_PORT:-28189}
GW_PORT=${GW_PORT:-24101}
ADMIN=127.0.0.1:${ADMIN_PORT:-29190}
for _ in $(seq "$STARTS"); do
	d=$(mktemp -d)
	"$BIN/mockai" -addr "$MOCK" -tls -one-segment -session-delay 0 -cert-out "$d/ca.pem" >/dev/null 2>&1 &
	m=$!
	for _ in $(seq 50); do [ -s "$d/ca.pem" ] && break; sleep 0.1; done
	LITELLM_MASTER_KEY=sk-local OPENAI_API_KEY=sk-mock OPENAI_API_BASE="wss://$MOCK/v1" UPSTREAM_CA_FILE="$d/ca.pem" \
		REALTIME_POOL_SIZE="$SIZE" HOST=127.0.0.1 PORT="$GW_PORT" ADMIN_ADDR="$ADMIN" "$BIN/gateway" >/dev/null 2>&1 &
	g=$!
	sleep 4
	w=$(curl -s "$ADMIN/metrics" | awk '/^rtgate_pool_warm_sockets/ {s+=$2} END {print s+0}')
	printf '%s ' "$w"
	kill "$g" "$m"
	wait "$g" "$m" 2>/dev/null || true
	rm -rf "$d"
done
echo
