#!/usr/bin/env python3
# heapsites.py TRACES N [TOP]: bytes per session by allocation site, from
# `go tool pprof -sample_index=inuse_space -traces HEAP.pb.gz > TRACES` of N held sessions
# (each site is its leaf frame and the first caller in crypto/tls, rtgate or netpoll).
import re,collections,sys
t=re.split(r'\n-{5,}\+-+\n', open(sys.argv[1]).read())
n=int(sys.argv[2])
mult={'B':1,'kB':1e3,'KB':1e3,'MB':1e6,'GB':1e9,'':1}
agg=collections.Counter()
for blk in t:
    lines=[l for l in blk.split('\n') if l.strip() and not l.strip().startswith('bytes:')]
    if not lines: continue
    m=re.match(r'\s*([\d.]+)([kKMG]?B)?\s+(.*)',lines[0])
    if not m: continue
    size=float(m.group(1))*mult[m.group(2) or '']; frames=[m.group(3).strip()]+[l.strip() for l in lines[1:]]
    key=frames[0]
    for f in frames[1:12]:
        if any(x in f for x in ['crypto/tls.','rtgate/','netpoll.(*connection)','netpoll.(*server)','netpoll.newTCP','netpoll.(*defaultPoll)','netpoll.DialTCP','netpoll.(*UnsafeLinkBuffer).growth']):
            key += '  <- '+f; break
    agg[key]+=size
for k,v in agg.most_common(int(sys.argv[3]) if len(sys.argv)>3 else 30):
    print(f"{v/n:7.0f} B/sess  {k}")
print(f"{sum(agg.values())/n:7.0f} B/sess  total")
