#!/bin/bash
# Run from the repo root after make build; then: python3 bench/tls/syscalls.py OUTDIR/perf.txt OUTDIR/run.log
# (system calls per relayed audio frame over the TLS audio window). Needs perf with syscall tracepoints.
# usage: sysc.sh HANDLERS OUTDIR  — runs the TLS throughput phase and counts the gateway's syscalls per second
h=$1; out=$2; mkdir -p $out
POLLER_HANDLERS=$h timeout 300 bin/wsbench peers -systems rtgate-pool-on -phases throughput -upstream tls -rounds 1 -quiet-limit 1s -retries 0 -out $out > $out/run.log 2>&1 &
W=$!
for i in $(seq 100); do G=$(pgrep -P "$(pgrep -P $W | head -1)" -x gateway); [ -n "$G" ] && break; sleep 0.2; done
echo G=$G >> $out/g.txt; sleep 1; perf stat -I 1000 -e syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_readv,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex -p $G -o $out/perf.txt &
P=$!
wait $W
kill -INT $P 2>/dev/null; wait $P
