# The table of README.md from the logs of ab.sh: python3 summarize.py DIR
import re,glob,statistics as st,sys
d=sys.argv[1]
rows={}
for f in glob.glob(f'{d}/r*.log'):
    r,pol=re.match(r'.*/r(\d+)-(.*)\.log',f).groups()
    for line in open(f):
        m=re.search(r'round \d+ (\w+)\s+(\S+)\s+p99\s+(\d+) µs\s+p99.9\s+(\d+)\s+ops\s+(\d+)/s\s+bg (\d+) MiB/s',line)
        if m:
            case,setup=m.group(1),m.group(2); p99,p999,ops,bg=map(int,m.groups()[2:])
            rows[(int(r),pol,case,setup)]=dict(p99=p99,p999=p999,ops=ops,bg=bg)
f=lambda v,n=0: f"{st.median(v):.{n}f} ({min(v):.{n}f}–{max(v):.{n}f})" if v else "-"
pols=sorted({k[1] for k in rows}); cases=sorted({k[2] for k in rows})
print("| case | background policy | setup | rounds | p99 µs | p99.9 µs | no-inheritance p99.9 ÷ setup's | bg % of vanilla (same invocation) |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for c in cases:
  for p in pols:
    for s in ("paio","paio-inherit"):
      rr=sorted(r for (r,pp,cc,ss) in rows if pp==p and cc==c and ss==s and (r,p,c,'vanilla') in rows)
      g=lambda k:[rows[(r,p,c,s)][k] for r in rr]
      van=[rows[(r,p,c,'vanilla')]['bg'] for r in rr]
      nop=[rows[(r,p,c,'paio')]['p999'] for r in rr]
      print(f"| {c} | {p} | {s} | {len(rr)} | {f(g('p99'))} | {f(g('p999'))} | {f([a/b for a,b in zip(nop,g('p999'))],1)}× | {f([a/b*100 for a,b in zip(g('bg'),van)])} % |")
