#!/usr/bin/env python3
"""Where an 8-octet ping-pong's one-way time goes, softrnic against the busy-polling
TCP ping-pong of the same run, from a trace of the data sockets' system calls.

usage: bench/lat-split.py SOFTRNIC [write_lat|send_lat] [N]
  runs `perf record -e raw_syscalls:sys_enter -e raw_syscalls:sys_exit SOFTRNIC TEST
  --loopback --baseline tcp -s 8 -n N --quiet` (N = 20000), then `perf script --ns`.
  usage: bench/lat-split.py --trace FILE   reads an existing `perf script --ns` output.

Only busy-polling rounds count (a recvfrom that brings data right after an empty one).
Per thread and data size (8: the TCP baseline; 28: softrnic's Write FPDU, 44: a Send):
  path  the recvfrom exit that brought the message -> the same thread's next sendto
        enter: the user work on the way to the reply (receive, the program, the post)
  wire  the peer's sendto enter -> that recvfrom exit: the kernel's loopback send, and
        the receiver noticing (its spin)
  spin  one empty recvfrom exit -> the next recvfrom exit of the same thread
Medians, in ns; the tracing adds about 0.2 us to path and wire alike. One-way = path
of one side + wire to the other. The last line: softrnic minus TCP, mean of the sides.
"""
import re
import statistics as st
import subprocess
import sys
import shutil
import tempfile
from collections import defaultdict

SENDTO, RECVFROM = 44, 45
LINE = re.compile(r'^\s*\S+\s+(\d+)\s+\[\d+\]\s+([\d.]+):\s+raw_syscalls:sys_(enter|exit):'
                  r'\s+NR (\d+)(?:.*= (-?\d+))?')


def events(path):
    out = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m and int(m.group(4)) in (SENDTO, RECVFROM):
                tid, t, kind, nr, ret = m.groups()
                out.append((float(t) * 1e9, int(tid), kind, int(nr),
                            int(ret) if ret else None))
    out.sort()
    return out


def split(evs):
    prev, data, send_at, last_empty, size_of = {}, {}, {}, {}, {}
    path, wire, spin = defaultdict(list), defaultdict(list), defaultdict(list)
    for t, tid, kind, nr, ret in evs:
        if nr == SENDTO and kind == 'enter':
            if tid in data:
                t0, sz = data.pop(tid)
                path[(tid, sz)].append(t - t0)
            send_at[tid] = t
        elif nr == RECVFROM and kind == 'exit' and ret is not None:
            p = prev.get(tid)
            busy = p is not None and p[1] < 0 and t - p[0] < 5000
            if ret > 0:
                if busy:
                    data[tid] = (t, ret)
                    peer = [ts for o, ts in send_at.items() if o != tid and ts < t]
                    if peer:
                        wire[(tid, ret)].append(t - max(peer))
                last_empty.pop(tid, None)
                size_of[tid] = ret
            else:
                if tid in last_empty and t - last_empty[tid] < 5000:
                    spin[(tid, size_of.get(tid))].append(t - last_empty[tid])
                last_empty[tid] = t
            prev[tid] = (t, ret)
    return path, wire, spin


def main():
    tmp = None
    if sys.argv[1:2] == ['--trace']:
        trace = sys.argv[2]
    else:
        binary = sys.argv[1]
        test = sys.argv[2] if len(sys.argv) > 2 else 'write_lat'
        n = sys.argv[3] if len(sys.argv) > 3 else '20000'
        tmp = tempfile.mkdtemp(prefix='lat-split-')
        data = f'{tmp}/perf.data'
        subprocess.run(['perf', 'record', '-q', '-o', data, '-e', 'raw_syscalls:sys_enter',
                        '-e', 'raw_syscalls:sys_exit', binary, test, '--loopback',
                        '--baseline', 'tcp', '-s', '8', '-n', n, '--quiet'],
                       check=True, stdout=subprocess.DEVNULL)
        trace = f'{tmp}/trace.txt'
        with open(trace, 'w') as f:
            subprocess.run(['perf', 'script', '-i', data, '--ns'], check=True, stdout=f,
                           stderr=subprocess.DEVNULL)
    try:
        path, wire, spin = split(events(trace))
    finally:
        # The perf data and its script take 1-2 GB a run: nothing of them is kept.
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    med = lambda x: st.median(x) if x else float('nan')
    rows = defaultdict(list)
    for k in sorted(path):
        if len(path[k]) < 500:
            continue
        who = 'tcp' if k[1] == 8 else 'softrnic'
        r = (med(path[k]), med(wire[k]), med(spin.get(k, [])))
        rows[who].append(r)
        print(f'{who:8} thread {k[0]} size {k[1]:>3} n {len(path[k]):6}  path {r[0]:5.0f}'
              f'  wire {r[1]:5.0f}  spin {r[2]:5.0f}')
    if rows['tcp'] and rows['softrnic']:
        mean = lambda who, i: sum(r[i] for r in rows[who]) / len(rows[who])
        d = [mean('softrnic', i) - mean('tcp', i) for i in range(3)]
        print(f'softrnic - tcp, mean of sides: path {d[0]:+.0f}  wire {d[1]:+.0f}'
              f'  spin {d[2]:+.0f} ns')


if __name__ == '__main__':
    main()
