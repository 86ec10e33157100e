#!/usr/bin/env bash
# poolrefill.sh GATEWAY_BIN N OUTPREFIX [VAR=value...]: the gateway starts with a fixed warm pool of N
# upstream sockets to mockai -tls (wss://); prints the CPU the gateway and mockai spent until all N
# are warm (from process start), and the TLS handshake counters.
set -u
GW=$1; N=$2; OUT=$3; shift 3
. "$(dirname "$0")/mockai.sh"
m0=$(cpu $mock)
t0=$(date +%s.%N)
env "$@" LITELLM_MASTER_KEY=sk-m OPENAI_API_KEY=sk-mock OPENAI_API_BASE=wss://localhost:$mp/v1 \
  UPSTREAM_CA_FILE=$d/ca.pem REALTIME_POOL_SIZE=$N LOG_LEVEL=warn HOST=127.0.0.1 PORT=$gp ADMIN_ADDR=127.0.0.1:$ap \
  $GW >$d/gw.log 2>&1 & gw=$!
w=0
for i in $(seq 600); do
  w=$(curl -s http://127.0.0.1:$ap/metrics 2>/dev/null | awk '/^rtgate_pool_warm_sockets/{s+=$2} END{print s+0}')
  [ "$w" -ge "$N" ] && break; sleep 0.05
done
c1=$(cpu $gw); m1=$(cpu $mock); t1=$(date +%s.%N)
hs=$(curl -s http://127.0.0.1:$ap/metrics | awk '/^rtgate_upstream_tls_(handshakes|resumed)_total/{printf "%s=%s ", $1, $2}')
echo "$OUT warm=$w secs=$(echo "$t1-$t0" | bc) gw_cpu_ms/socket=$(echo "scale=3; $c1*10/$N" | bc) mock_cpu_ms/socket=$(echo "scale=3; ($m1-$m0)*10/$N" | bc) $hs"
rm -rf $d
