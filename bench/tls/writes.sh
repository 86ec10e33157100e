#!/usr/bin/env bash
# writes.sh GATEWAY_BIN OUTPREFIX N: N calls (wsbench -audio: 1 s of 20 ms appends up, then a
# response with mockai's 5 audio deltas of 6.4 KB base64 down) over wss:// on both hops
# (gateway TLS listener, mockai -tls upstream), pool off, with strace counting the gateway's writes.
set -u
GW=$1; OUT=$2; N=$3
. "$(dirname "$0")/mockai.sh"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 -keyout $d/gw.key -out $d/gw.crt >/dev/null 2>&1
env LITELLM_MASTER_KEY=sk-m OPENAI_API_KEY=sk-mock OPENAI_API_BASE=wss://localhost:$mp/v1 TLS_CERT=$d/gw.crt TLS_KEY=$d/gw.key \
  UPSTREAM_CA_FILE=$d/ca.pem REALTIME_POOL_SIZE=0 LOG_LEVEL=warn HOST=127.0.0.1 PORT=$gp ADMIN_ADDR=127.0.0.1:$ap \
  $GW >$d/gw.log 2>&1 & gw=$!
sleep 1
strace -f -qq -e trace=write,writev,sendmsg,sendto -o $d/st -p $gw & st=$!
sleep 1
$B/wsbench -host wss://127.0.0.1:$gp -ca $d/gw.crt -key sk-m -n $N -c 2 -audio -quiet >$OUT.bench.txt 2>&1
sleep 0.5
kill $st; wait $st 2>/dev/null
# writes and their sizes (return values); sizes of crypto/tls's dynamic records: k*1186+22 (TLS 1.3 AES-GCM)
awk -v n=$N '/= [0-9]+$/{c++; s=$NF; b+=s; if (s>=1000) big++; if ((s-22)%1186==0 && s<16000 && s>1000) dyn++}
  END{printf "%s calls=%d writes=%d (%.1f/call) bytes/call=%.0f writes>=1000B/call=%.1f dynamic-size records/call=%.2f\n", ENVIRON["OUT"], n, c, c/n, b/n, big/n, dyn/n}' OUT=$OUT $d/st
grep -E "^\| (total|first)" $OUT.bench.txt | head -2
cp $d/st $OUT.strace
rm -rf $d
