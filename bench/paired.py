#!/usr/bin/env python3
"""Summarise `--pairs` runs: for each size of each JSON-lines file, the headline ratio to
the busy-polling TCP stream beside the paired sub-runs' ratios, their median and the
pooled ratio, and what the headline's busy-poll stream did per message (`calls`).

    python3 bench/paired.py OUT/*.jsonl
"""
import json
import sys


def rows(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    yield json.loads(line)
                except ValueError:
                    pass


def main(paths):
    for path in paths:
        tcp = {}
        for r in rows(path):
            key = (r.get("test"), r.get("bytes"), r.get("qps"))
            if r.get("transport") == "tcp":
                tcp[key] = r.get("baselines", {}).get("busy_poll", {})
                continue
            if r.get("transport") != "softrnic":
                continue
            bp = tcp.pop(key, {})
            head = r.get("ratios_vs_tcp", {}).get("busy_poll")
            line = f"{path}: {key[0]} {key[1]} B softrnic {r['bw_average']:.0f}"
            line += f" busy-poll {bp.get('bw_average', 0):.0f}"
            line += f" headline x{head:.2f}" if head else " headline -"
            p = r.get("paired")
            if p:
                ratios = " ".join(f"{x:.2f}" for x in p["ratios"])
                line += f" | pairs {ratios} median x{p['median_ratio']:.2f}"
                pooled = p.get("pooled_ratio") or sum(p["softrnic_bw"]) / sum(p["tcp_bw"])
                line += f" pooled x{pooled:.2f}"
            c = bp.get("calls")
            if c:
                line += (f" | TCP reads/msg {c['reads_per_msg']:.2f} of"
                         f" {c['octets_per_read']:.0f} B, empty {c['empty_reads_per_msg']:.1f},"
                         f" full sends {c['full_sends_per_msg']:.2f}")
            print(line)


if __name__ == "__main__":
    main(sys.argv[1:])
