#!/usr/bin/env bash
# idleheap.sh GATEWAY_BIN N OUTPREFIX [VAR=value...]: N idle sessions through the gateway (pool off,
# ws:// clients from wsbench -hold) in front of mockai -tls (wss:// upstream); prints the gateway's
# CPU while opening them, RSS and live heap per session, and saves /debug/pprof/heap.
set -u
GW=$1; N=$2; OUT=$3; shift 3
. "$(dirname "$0")/mockai.sh"
env "$@" LITELLM_MASTER_KEY=sk-m OPENAI_API_KEY=sk-mock OPENAI_API_BASE=wss://localhost:$mp/v1 \
  UPSTREAM_CA_FILE=$d/ca.pem REALTIME_POOL_SIZE=0 LOG_LEVEL=warn HOST=127.0.0.1 PORT=$gp ADMIN_ADDR=127.0.0.1:$ap \
  $GW >$d/gw.log 2>&1 & gw=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:$gp/health >/dev/null && break; sleep 0.1; done
heap() { curl -s "http://127.0.0.1:$ap/debug/pprof/heap?gc=1&debug=1" | awk '/^# HeapAlloc = /{print $4}'; }
h0=$(heap); c0=$(cpu $gw); m0=$(cpu $mock)
$B/wsbench -host ws://127.0.0.1:$gp -key sk-m -hold $N -hold-for 20s -c ${C:-50} -quiet >$OUT.hold.txt 2>&1 & wb=$!
for i in $(seq 240); do
  a=$(curl -sk https://127.0.0.1:$mp/mock/stats 2>/dev/null | tr -d ' ' | grep -o '"active":[0-9]*' | cut -d: -f2)
  [ "${a:-0}" -ge "$N" ] && break; sleep 0.25
done
c1=$(cpu $gw); m1=$(cpu $mock)
sleep 4
h1=$(heap)
curl -s "http://127.0.0.1:$ap/debug/pprof/heap" -o $OUT.heap.pb.gz
rss=$(grep VmRSS /proc/$gw/status | awk '{print $2}')
hs=$(curl -s http://127.0.0.1:$ap/metrics | awk '/^rtgate_upstream_tls_(handshakes|resumed)_total/{printf "%s=%s ", $1, $2}')
echo "$OUT active=$a rss_KiB/sess=$(echo "scale=2; $rss/$N" | bc) heap_KiB/sess=$(echo "scale=2; ($h1-$h0)/1024/$N" | bc) gw_cpu_ms/connect=$(echo "scale=3; ($c1-$c0)*10/$N" | bc) mock_cpu_ms/connect=$(echo "scale=3; ($m1-$m0)*10/$N" | bc) $hs"
wait $wb
rm -rf $d
