#!/bin/bash
# The own TCP's retransmission timeouts on the in-process network, before and after:
# alternates /work/t-before/softrnic and /work/t-after/softrnic (release builds), N
# rounds of a clean and a lossy (1% loss, 5% reordering, seed = round) write_bw
# --loopback -s 64K,1M -D 2 run each. One line per result: round binary mode size
# timeouts spurious_timeouts bw_MBps fast_retransmits loss_probes; the load average
# per round goes to OUT.load.
# Usage: bench/user-tcp-timeouts.sh [N] [OUT]
N=${1:-10}
OUT=${2:-/tmp/t-cli-ab.txt}
: > $OUT
for r in $(seq 1 $N); do
  for b in before after; do
    for mode in clean lossy; do
      extra=""
      [ $mode = lossy ] && extra="--loss 1% --reorder 5% --seed $r"
      /work/t-$b/softrnic write_bw --loopback -s 64K,1M -D 2 --json --quiet --transport user:sim $extra 2>/dev/null | \
      python3 -c '
import sys,json
for l in sys.stdin:
    try: d=json.loads(l)
    except: continue
    if d.get("type")!="result": continue
    o=d.get("own_tcp",{})
    print(sys.argv[1],sys.argv[2],sys.argv[3],d["bytes"],o.get("timeouts"),o.get("spurious_timeouts"),round(d["bw_average"]),o.get("fast_retransmits"),o.get("loss_probes"))
' $r $b $mode >> $OUT
    done
  done
  echo "round $r $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT.load
done
