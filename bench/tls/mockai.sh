# Sourced by the bench/tls scripts: a temp folder ($d), three free-ish ports
# (mockai $mp, the gateway $gp, its admin $ap), mockai -tls on $mp with its CA
# in $d/ca.pem (pid $mock), and an exit trap that stops what the script
# started ($mock, and $gw once set) and removes $d.
B=${B:-bin}
d=$(mktemp -d)
mp=$((20000 + RANDOM % 10000)); gp=$((mp+1)); ap=$((mp+2))
gw=
trap 'kill $gw $mock 2>/dev/null; wait $gw $mock 2>/dev/null; rm -rf $d' EXIT
$B/mockai -tls -addr 127.0.0.1:$mp -cert-out $d/ca.pem >$d/mock.log 2>&1 & mock=$!
sleep 0.5
# cpu PID: user+system ticks of a process so far.
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
