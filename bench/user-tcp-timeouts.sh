#!/bin/bash
# The own TCP's retransmission timeouts on the in-process network, before and after:
# alternates the release binaries $A (before, default /work/t-before/softrnic) and $B
# (after, default /work/t-after/softrnic), N rounds of a clean and a lossy (1% loss,
# 5% reordering, seed = round, from FIRST) write_bw --loopback -s 64K,1M -D 2 run
# each. One line per result: round binary mode size timeouts spurious_timeouts
# bw_MBps fast_retransmits loss_probes handshake_timeouts (the part of the timeouts
# that resent a SYN: not steady state; "None" from binaries older than session 17);
# the load average per round goes to OUT.load.
# Usage: [A=...] [B=...] bench/user-tcp-timeouts.sh [N] [OUT] [FIRST]
N=${1:-10}
OUT=${2:-/tmp/t-cli-ab.txt}
FIRST=${3:-1}
A=${A:-/work/t-before/softrnic}
B=${B:-/work/t-after/softrnic}
: > $OUT
for r in $(seq $FIRST $((FIRST + N - 1))); do
  for b in before after; do
    bin=$A; [ $b = after ] && bin=$B
    for mode in clean lossy; do
      extra=""
      [ $mode = lossy ] && extra="--loss 1% --reorder 5% --seed $r"
      $bin write_bw --loopback -s 64K,1M -D 2 --json --quiet --transport user:sim $extra 2>/dev/null | \
      python3 -c '
import sys,json
for l in sys.stdin:
    try: d=json.loads(l)
    except: continue
    if d.get("type")!="result": continue
    o=d.get("own_tcp",{})
    print(sys.argv[1],sys.argv[2],sys.argv[3],d["bytes"],o.get("timeouts"),o.get("spurious_timeouts"),round(d["bw_average"]),o.get("fast_retransmits"),o.get("loss_probes"),o.get("handshake_timeouts"))
' $r $b $mode >> $OUT
    done
  done
  echo "round $r $(cut -d' ' -f1-3 /proc/loadavg)" >> $OUT.load
done
