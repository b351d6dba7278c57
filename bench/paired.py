#!/usr/bin/env python3
"""Summarise `--pairs` runs: for each size of each JSON-lines file, the headline ratio to
the TCP stream the pairs ran (`--pairs-with`, busy-poll by default) beside the paired
sub-runs' ratios, their median and the pooled ratio (of bandwidth, and of CPU seconds
per GB where counted), and what the headline's busy-poll stream did per message
(`calls`); with several -q counts (`paired_qps`), the headline's last count over its
first beside the count pairs' ratios, median and pooled ratio;
latency tests: t_typical, t_avg and 99% of the headline's ratio to the busy-polling
ping-pong beside the pairs' median and pooled ratios of each. Where the run measured
it (loopback, session 31 on), each pair's CPUs' cache-line round trip before its TCP and
softrnic sub-runs follows (`rt` TCP/softrnic, ns): how far apart the host had put the
two CPUs.

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
        soft = {}
        for r in rows(path):
            key = (r.get("test"), r.get("bytes"), r.get("qps"))
            if "paired_qps" in r:
                print(counts(path, r, soft))
                continue
            if r.get("transport") == "tcp":
                tcp[key] = r.get("baselines", {})
                continue
            if r.get("transport") != "softrnic":
                continue
            soft[key] = r.get("bw_average")
            kind = (r.get("paired") or {}).get("baseline", "busy_poll")
            baselines = tcp.pop(key, {})
            bp = baselines.get("busy_poll", {})
            if "t_typical_usec" in r:
                print(latency(path, key, r, bp))
                continue
            head = r.get("ratios_vs_tcp", {}).get(kind)
            line = f"{path}: {key[0]} {key[1]} B softrnic {r['bw_average']:.0f}"
            line += f" {kind} {baselines.get(kind, {}).get('bw_average', 0):.0f}"
            line += f" headline x{head:.2f}" if head else " headline -"
            p = r.get("paired")
            if p:
                ratios = " ".join(f"{x:.2f}" for x in p["ratios"])
                line += f" | pairs {ratios} median x{p['median_ratio']:.2f}"
                pooled = p.get("pooled_ratio") or sum(p["softrnic_bw"]) / sum(p["tcp_bw"])
                line += f" pooled x{pooled:.2f}"
                if p.get("cpu_median_ratio") is not None:
                    line += f" | CPU/GB median x{p['cpu_median_ratio']:.2f}"
                    cp = p.get("cpu_pooled_ratio")
                    line += f" pooled x{cp:.2f}" if cp is not None else " pooled -"
                line += round_trips(p)
            c = bp.get("calls")
            if c:
                line += (f" | TCP reads/msg {c['reads_per_msg']:.2f} of"
                         f" {c['octets_per_read']:.0f} B, empty {c['empty_reads_per_msg']:.1f},"
                         f" full sends {c['full_sends_per_msg']:.2f}")
            print(line)


def counts(path, r, soft):
    """One size's count pairs: the headline's last count over its first, then the pairs'."""
    p = r["paired_qps"]
    a, b = p["qps"]
    ha, hb = soft.get((r["test"], r["bytes"], a)), soft.get((r["test"], r["bytes"], b))
    line = f"{path}: {r['test']} {r['bytes']} B {b} QPs / {a}:"
    line += f" headline {hb:.0f} / {ha:.0f} = x{hb / ha:.2f}" if ha and hb else " headline -"
    ratios = " ".join(f"{x:.2f}" for x in p["ratios"])
    line += (f" | tx depth {p['tx_depth']} a QP, pairs {ratios}"
             f" median x{p['median_ratio']:.2f} pooled x{p['pooled_ratio']:.2f}")
    return line


def latency(path, key, r, bp):
    """One latency size: headline ratios to the busy-poll ping-pong, then the pairs'."""
    x = lambda v: f"x{v:.2f}" if isinstance(v, (int, float)) else "-"
    head = r.get("lat_ratios_vs_tcp", {}).get("busy_poll", {})
    line = (f"{path}: {key[0]} {key[1]} B softrnic t_typical {r['t_typical_usec']:.2f}"
            f" busy-poll {bp.get('t_typical_usec', 0):.2f} us | headline")
    stats = (("t_typical", "t_typical"), ("t_avg", "t_avg"), ("p99", "99%"))
    for k, label in stats:
        line += f" {label} {x(head.get(k))}"
    p = r.get("paired")
    if p:
        line += f" | {len(p['tcp'])} pairs: median"
        for k, label in stats:
            line += f" {label} {x(p['median_ratio'].get(k))}"
        line += ", pooled"
        for k, label in stats:
            line += f" {label} {x(p['pooled_ratio'].get(k))}"
        line += round_trips(p)
    return line


def round_trips(p):
    """The pairs' CPU round trips (TCP/softrnic sub-run, ns), if the run measured any."""
    rt = p.get("cpu_round_trip_ns") or []
    if not any(v is not None for pair in rt for v in pair):
        return ""
    ns = lambda v: f"{v:.0f}" if v is not None else "-"
    return " | rt " + " ".join(f"{ns(t)}/{ns(s)}" for t, s in rt)


if __name__ == "__main__":
    main(sys.argv[1:])
