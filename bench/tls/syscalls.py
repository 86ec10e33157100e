import sys,re,collections
# syscalls.py perf.txt run.log : per-second counts during the audio window (the last 5 full seconds of the busy period)
rows=collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p=l.split()
    if len(p)>=3 and p[0][0].isdigit():
        rows[float(p[0])][p[2].split(':')[-1].replace('sys_enter_','')]=int(p[1].replace(',',''))
ts=sorted(rows)
busy=[t for t in ts if rows[t].get('write',0)+rows[t].get('writev',0)>1500]
aud=busy[-5:]
rate=float(re.findall(r'load=audio relayed_per_s=(\d+)',open(sys.argv[2]).read())[0])
keys=['read','readv','write','writev','epoll_wait','futex']
print('audio window', ['%.0f'%t for t in aud], 'relayed/s', rate)
print(' '.join('%s=%.3f'%(k, sum(rows[t].get(k,0) for t in aud)/len(aud)/rate) for k in keys), 'total=%.3f'%(sum(sum(rows[t].get(k,0) for k in keys) for t in aud)/len(aud)/rate))
