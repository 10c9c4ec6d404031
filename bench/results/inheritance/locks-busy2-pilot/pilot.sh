cd /work/main
for r in 0 1; do
  for p in b1 b2; do
    if [ $p = b1 ]; then pol=bench/inheritance/background.toml; else pol=/tmp/pol/inh-b2.toml; fi
    python3 bench/inheritance/run.py --cases locks --rounds 1 --no-plot --bg-policy $pol --out /tmp/inhp/r$r-$p > /tmp/inhp/r$r-$p.log 2>&1
    echo "$(date +%T) r$r $p" >> /tmp/inhp/progress
  done
done
echo DONE >> /tmp/inhp/progress
