#!/bin/bash
# Run from the repo root after make build. Example (TLS, old binary A vs new B, both inline, 4 interleaved pairs):
#   bash bench/tls/throughput-ab.sh /tmp/ab 4 inline /tmp/gw-old inline bin/gateway
# ab.sh OUT PAIRS A_HANDLERS A_BIN B_HANDLERS B_BIN [upstream]: interleaved TLS/plain throughput phase, CPU per 100k round trips
out=$1; pairs=$2; up=${7:-tls}; mkdir -p $out
for i in $(seq $pairs); do
  for s in A B; do
    if [ $s = A ]; then h=$3; b=$4; else h=$5; b=$6; fi
    POLLER_HANDLERS=$h timeout 300 bin/wsbench peers -gateway $b -systems rtgate-pool-on -phases throughput -upstream $up -rounds 1 -quiet-limit 1s -retries 0 -out $out/$s$i > $out/$s$i.log 2>&1
    python3 - $out/$s$i $s $i <<'PY'
import json,glob,sys
for f in glob.glob(sys.argv[1]+'/*/results.json'):
    d=json.load(open(f))
    res=[]
    def walk(x):
        if isinstance(x,dict):
            if 'proxy_cpu_seconds_per_100k_round_trips' in x: res.append('%s=%.3f(%d/s)'%(x['load'],x['proxy_cpu_seconds_per_100k_round_trips'],x['relayed_per_second']))
            for v in x.values(): walk(v)
        elif isinstance(x,list):
            for v in x: walk(v)
    walk(d); print(sys.argv[2], sys.argv[3], ' '.join(res), flush=True)
PY
  done
done
