# The table of summary.md from the logs of ab.sh: python3 summarize.py DIR
import re,glob,statistics as st,sys
d=sys.argv[1]
rows={}
for f in glob.glob(f'{d}/r*.log'):
    r,s=re.match(r'.*/r(\d+)-(.*)\.log',f).groups()
    for line in open(f):
        m=re.search(r'round \d+ \S+\s+(\w+)\s+p50\s+(\d+) µs\s+p99\s+(\d+)\s+p99.9\s+(\d+)\s+crit\s+(\d+)/s\s+bg\s+(\d+) MiB/s \(alone (\d+)\)',line)
        if not m: continue
        w=m.group(1); p50,p99,p999,crit,bg,al=map(int,m.groups()[1:])
        rows[(int(r),s,w)]=dict(p50=p50,p99=p99,p999=p999,bg=bg,alone=al,crit=crit)
rounds=sorted({k[0] for k in rows}); setups=sorted({k[1] for k in rows}); wl=sorted({k[2] for k in rows})
f=lambda v,n=0: f"{st.median(v):.{n}f} ({min(v):.{n}f}–{max(v):.{n}f})" if v else "-"
print("| workload | setup | rounds | p99 µs | p99.9 µs | p99.9 vanilla ÷ setup | bg % of vanilla | alone % of vanilla |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for w in wl:
  for s in setups:
    rr=[r for r in rounds if (r,s,w) in rows and (r,'vanilla',w) in rows]
    g=lambda k:[rows[(r,s,w)][k] for r in rr]
    v=lambda k:[rows[(r,'vanilla',w)][k] for r in rr]
    print(f"| {w} | {s} | {len(rr)} | {f(g('p99'))} | {f(g('p999'))} | {f([a/b for a,b in zip(v('p999'),g('p999'))],1)}× | {f([a/b*100 for a,b in zip(g('bg'),v('bg'))])} % | {f([a/b*100 for a,b in zip(g('alone'),v('alone'))])} % |")
