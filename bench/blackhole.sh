#!/usr/bin/env bash
# The blackholed-deployment run (issue 10): the gateway in front of a routes
# config file with two deployments of one model group, the first a mockai
# that accepts the connection and never answers the upgrade (-upgrade-delay
# 1h: a deployment gone dark behind a load balancer that still accepts), the
# second a working mockai. wsbench then runs N calls at C concurrent against
# the gateway and the gateway's routing metrics are printed.
#
# Without passive health and hedged dials every connect routed to the dark
# deployment waited the dial timeout (total p50 10,007 ms on 2026-11-30).
#
#   bench/blackhole.sh                    wss:// upstreams, pool off, 200 calls at 20
#   TLS=0 bench/blackhole.sh              plain ws:// upstreams
#   POOL=4 bench/blackhole.sh             with the warm pool (REALTIME_POOL_SIZE)
#   N=500 C=50 HEDGE_MS=250 bench/blackhole.sh
#
# Everything listens on 127.0.0.1; every process it starts is stopped by PID
# on exit. Extra arguments go to wsbench.
set -euo pipefail

TLS=${TLS:-1}
POOL=${POOL:-0}
N=${N:-200}
C=${C:-20}
HEDGE_MS=${HEDGE_MS:-500}
DIAL_TIMEOUT_SECS=${DIAL_TIMEOUT_SECS:-10}
BIN=${BIN:-bin}

cd "$(dirname "$0")/.."
go build -o "$BIN/" ./cmd/gateway ./cmd/mockai ./cmd/wsbench

tmp=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# freeport asks the kernel for a free loopback port.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# waitport waits until something listens on 127.0.0.1:$1.
waitport() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	exit 1
}

hole_port=$(freeport)
good_port=$(freeport)
gw_port=$(freeport)
admin_port=$(freeport)
scheme=ws
hole_tls=()
good_tls=()
if [ "$TLS" = 1 ]; then
	scheme=wss
	hole_tls=(-tls -cert-out "$tmp/hole.pem")
	good_tls=(-tls -cert-out "$tmp/good.pem")
fi

"$BIN/mockai" -addr "127.0.0.1:$hole_port" -upgrade-delay 1h "${hole_tls[@]}" 2>"$tmp/hole.log" &
pids+=($!)
"$BIN/mockai" -addr "127.0.0.1:$good_port" "${good_tls[@]}" 2>"$tmp/good.log" &
pids+=($!)
waitport "$hole_port"
waitport "$good_port"
ca=()
if [ "$TLS" = 1 ]; then
	cat "$tmp/hole.pem" "$tmp/good.pem" >"$tmp/ca.pem"
	ca=(UPSTREAM_CA_FILE="$tmp/ca.pem")
fi

cat >"$tmp/config.yaml" <<EOF
model_list:
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: $scheme://127.0.0.1:$hole_port/v1
  - model_name: gpt-realtime
    litellm_params:
      model: openai/gpt-realtime
      api_base: $scheme://127.0.0.1:$good_port/v1
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
EOF

env LITELLM_MASTER_KEY=sk-bench OPENAI_API_KEY=sk-mock CONFIG_FILE="$tmp/config.yaml" "${ca[@]}" \
	PORT="$gw_port" ADMIN_ADDR="127.0.0.1:$admin_port" REALTIME_POOL_SIZE="$POOL" \
	UPSTREAM_HEDGE_MS="$HEDGE_MS" UPSTREAM_DIAL_TIMEOUT_SECS="$DIAL_TIMEOUT_SECS" \
	"$BIN/gateway" 2>"$tmp/gateway.log" &
pids+=($!)
waitport "$gw_port"

echo "# blackholed deployment: upstreams $scheme://, pool $POOL, hedge ${HEDGE_MS} ms, dial timeout ${DIAL_TIMEOUT_SECS} s, $N calls at $C concurrent"
WSBENCH_KEY=sk-bench "$BIN/wsbench" -host "127.0.0.1:$gw_port" -insecure -quiet -n "$N" -c "$C" "$@"
echo
echo "gateway metrics:"
python3 - "$admin_port" <<'EOF'
import sys, urllib.request
body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in body.splitlines():
    if line.startswith(("rtgate_upstream_", "rtgate_sessions_total")):
        print("  " + line)
EOF
