#!/usr/bin/env bash
# plainheap.sh GATEWAY_BIN N OUTPREFIX [VAR=value...]: idleheap.sh over a plain ws:// upstream
set -u
GW=$1; N=$2; OUT=$3; shift 3
B=${B:-bin}
d=$(mktemp -d)
mp=$((20000 + RANDOM % 10000)); gp=$((mp+1)); ap=$((mp+2))
gw=
trap 'kill $gw $mock 2>/dev/null; wait $gw $mock 2>/dev/null; rm -rf $d' EXIT
$B/mockai -addr 127.0.0.1:$mp >$d/mock.log 2>&1 & mock=$!
sleep 0.5
env "$@" LITELLM_MASTER_KEY=sk-m OPENAI_API_KEY=sk-mock OPENAI_API_BASE=ws://127.0.0.1:$mp/v1 \
  REALTIME_POOL_SIZE=0 LOG_LEVEL=warn HOST=127.0.0.1 PORT=$gp ADMIN_ADDR=127.0.0.1:$ap \
  $GW >$d/gw.log 2>&1 & gw=$!
for i in $(seq 50); do curl -sf http://127.0.0.1:$gp/health >/dev/null && break; sleep 0.1; done
heap() { curl -s "http://127.0.0.1:$ap/debug/pprof/heap?gc=1&debug=1" | awk '/^# HeapAlloc = /{print $4}'; }
h0=$(heap); r0=$(grep VmRSS /proc/$gw/status | awk '{print $2}')
$B/wsbench -host ws://127.0.0.1:$gp -key sk-m -hold $N -hold-for 15s -c 50 -quiet >$OUT.hold.txt 2>&1 & wb=$!
for i in $(seq 240); do
  a=$(curl -s http://127.0.0.1:$mp/mock/stats 2>/dev/null | tr -d ' ' | grep -o '"active":[0-9]*' | cut -d: -f2)
  [ "${a:-0}" -ge "$N" ] && break; sleep 0.25
done
sleep 3
h1=$(heap)
curl -s "http://127.0.0.1:$ap/debug/pprof/heap" -o $OUT.heap.pb.gz
rss=$(grep VmRSS /proc/$gw/status | awk '{print $2}')
echo "$OUT active=$a rss_KiB/sess=$(echo "scale=2; $rss/$N" | bc) rss_delta_KiB/sess=$(echo "scale=2; ($rss-$r0)/$N" | bc) heap_KiB/sess=$(echo "scale=2; ($h1-$h0)/1024/$N" | bc)"
wait $wb
