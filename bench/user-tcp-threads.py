#!/usr/bin/env python3
"""Per-thread CPU time and context switches of one softrnic run, for telling where a
run's time went (e.g. the own TCP's stack threads: `softrnic-tcp-N`, whose voluntary
switches are their wake-ups). Polls /proc every 10 ms and keeps each thread's last
values (threads that exit keep what was seen 10 ms or less before).

usage: bench/user-tcp-threads.py SOFTRNIC ARGS...   (e.g. write_bw --loopback
       --transport user:sim --loss 1% --reorder 5% --seed 1 -s 64K -n 3000)
`--json --quiet` is appended; prints one line per thread, then per size the goodput,
the bench's per-role CPU (`placement`) and the own TCP's non-zero counters.
"""
import glob
import json
import os
import subprocess
import sys
import time

p = subprocess.Popen(sys.argv[1:] + ["--json", "--quiet"], stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)
seen = {}
tck = os.sysconf("SC_CLK_TCK")
while p.poll() is None:
    for t in glob.glob(f"/proc/{p.pid}/task/*"):
        try:
            st = open(t + "/stat").read()
            comm = open(t + "/comm").read().strip()
            status = open(t + "/status").read()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        vol = invol = 0
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            if line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
        seen[t.rsplit("/", 1)[1]] = (comm, (int(f[11]) + int(f[12])) * 1000 // tck, vol, invol)
    time.sleep(0.01)
out = p.stdout.read().decode()
for tid, (comm, ms, vol, invol) in sorted(seen.items(), key=lambda x: int(x[0])):
    if ms or vol > 5:
        print(f"{tid:>7} {comm:<18} cpu_ms={ms} vol={vol} invol={invol}")
for line in out.splitlines():
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("type") != "result":
        continue
    pl = {x["role"]: round(x["cpu_ms"]) for x in d.get("placement", [])}
    print(f"size={d['bytes']} bw={d['bw_average']:.0f} secs={d['seconds']:.2f} placement={pl}")
    print("  own_tcp", {k: v for k, v in d.get("own_tcp", {}).items() if v})
