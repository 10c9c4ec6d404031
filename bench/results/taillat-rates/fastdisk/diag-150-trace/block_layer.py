"""Block-layer latencies from `perf script -F comm,tid,time,event,trace` of
block:block_bio_queue, block_rq_insert, block_rq_issue and block_rq_complete
(disk 254,0): for small reads (<= 16 sectors: the Gets' blocks), large reads
(compaction pieces) and writes, the time from bio_queue (which blk-throttle
emits only when a bio leaves its queue), from insert (into the I/O
scheduler) and from issue (to the device) to completion. Requests are
matched by sector and direction; those whose events perf did not keep are
left out.

    python3 block_layer.py blk.txt
"""
import re
import sys
pat=re.compile(r'^\s*(\S+)\s+(\d+)\s+([\d.]+):\s+block:(\w+):\s+254,0\s+(\w+)\s+(.*)$')
pend_q={}; pend_i={}; pend_s={}
res=[]  # (t_complete, size_sectors, rw, q2c, i2c, s2c)
for line in open(sys.argv[1]):
    m=pat.match(line)
    if not m: continue
    comm,tid,t,ev,rw,rest=m.groups(); t=float(t)
    mm=re.search(r'(\d+) \+ (\d+)',rest)
    if not mm: continue
    sec,n=int(mm.group(1)),int(mm.group(2))
    key=(sec,rw[0])
    if ev=='block_bio_queue': pend_q[key]=(t,n)
    elif ev=='block_rq_insert': pend_i[key]=t
    elif ev=='block_rq_issue': pend_s[key]=t
    elif ev=='block_rq_complete':
        q=pend_q.pop(key,None); i=pend_i.pop(key,None); s=pend_s.pop(key,None)
        if s is None: continue
        res.append((t,n,rw[0],(t-q[0]) if q else None,(t-i) if i else None,t-s))
small=[r for r in res if r[2]=='R' and r[1]<=16]
big=[r for r in res if r[2]=='R' and r[1]>16]
def pct(xs,p):
    xs=sorted(xs); return xs[min(len(xs)-1,int(p*len(xs)))] if xs else float('nan')
for name,rs in (('small reads',small),('large reads',big),('writes',[r for r in res if r[2]=='W'])):
    for label,idx in (('queue->complete',3),('insert->complete',4),('issue->complete',5)):
        xs=[r[idx]*1e3 for r in rs if r[idx] is not None]
        if xs: print("%-12s %-17s n=%7d p50 %.3f p99 %.3f p999 %.3f max %.2f ms; >3ms: %d"%(name,label,len(xs),pct(xs,.5),pct(xs,.99),pct(xs,.999),max(xs),sum(1 for x in xs if x>3)))
