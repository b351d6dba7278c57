#!/usr/bin/env python3
"""Turns one tool's raw output into normalized result lines (JSON Lines) for plot.py.

    collect.py softrnic RAW OUT --cmd CMD
    collect.py fi       RAW OUT --cmd CMD --bytes N
    collect.py ucx      RAW OUT --cmd CMD --bytes N --test T [--label L] [--lat-kind K]

Every line written has: system, label (one line of the plot / row of the table), test,
metric ("bw" or "lat"), bytes, and either bw_mib_s (MiB/s, MiB = 2^20 octets, as perftest
and ucx_perftest count) or lat_us with lat_kind ("one-way" or "round trip") and lat_stat
("median" or "average"), plus the command that produced it.

Standard library only, so that it runs whether or not matplotlib could be installed.
"""

import argparse
import json
import sys

MIB = float(1 << 20)

# The TCP baselines' lines, by the softrnic test they were run with: what the pattern is,
# and for tests whose pattern another test's baseline already shows, which test ran it
# (those are "companion" rows: in the ratios, not in the tables and plot).
TCP_PATTERNS = {
    "write_bw": ("TCP stream", None),
    "read_bw": ("TCP stream", "read_bw"),
    "send_bw": ("TCP stream", "send_bw"),
    "write_lat": ("TCP ping-pong", None),
    "send_lat": ("TCP ping-pong", "send_lat"),
    "read_lat": ("TCP request/response", None),
}
# The disciplines of the baselines (the CLI's TcpKind names) as the labels say them.
TCP_KINDS = {"blocking": "blocking", "busy_poll": "busy-poll", "batching": "batching"}


def tcp_label(test, kind):
    pattern, companion = TCP_PATTERNS.get(test, (f"TCP ({test})", test))
    with_test = f", with {companion}" if companion else ""
    return f"{pattern}, {TCP_KINDS.get(kind, kind)} (baseline{with_test})", companion is not None


def figures(j, r):
    """The metric fields of one result object (a line, or one of a tcp line's baselines)."""
    if "bw_average" in j:
        if j.get("bw_unit") != "MB/sec":
            sys.exit(f"collect.py: unexpected bw_unit {j.get('bw_unit')!r} (run without --report_gbits)")
        r.update(metric="bw", bw_mib_s=j["bw_average"], bw_peak_mib_s=j["bw_peak"],
                 msg_rate_mpps=j["msg_rate_mpps"], seconds=j.get("seconds"))
    else:
        r.update(metric="lat", lat_us=j["t_typical_usec"], lat_stat="median",
                 lat_kind="one-way" if j.get("half_round_trip", True) else "round trip",
                 lat_avg_us=j["t_avg_usec"], lat_p99_us=j["p99_usec"],
                 lat_p99_9_us=j.get("p99_9_usec"))
    for k in ("cpu_seconds", "cpu_s_per_gb", "cpu_s_per_mmsg", "cpu_scope"):
        if k in j:
            r[k] = j[k]
    return r


def softrnic(raw, cmd):
    """The CLI's --json lines: one per size and transport (softrnic, and tcp for the baseline,
    which carries every TCP discipline that ran in `baselines`, the strongest named in
    `baseline`)."""
    out = []
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        if j.get("type") != "result":
            continue
        test = j["test"]
        base = {"test": test, "bytes": j["bytes"], "cmd": cmd}
        if j["transport"] == "tcp":
            # Older output: one baseline, blocking stream or busy-polling ping-pong.
            kinds = j.get("baselines") or {
                ("blocking" if test.endswith("_bw") else "busy_poll"): j}
            for kind, b in sorted(kinds.items()):
                label, companion = tcp_label(test, kind)
                if j.get("events"):
                    # Beside a softrnic -e run: the same baseline as the polling run's.
                    label, companion = label[:-1] + ", beside -e)", True
                r = dict(base, system="tcp", label=label, baseline=kind,
                         iterations=b.get("iterations", j["iterations"]),
                         strongest=kind == j.get("baseline", kind))
                if companion:
                    r["companion"] = True
                out.append(figures(b, r))
            continue
        r = dict(base, system="softrnic", label=f"softrnic {test}", iterations=j["iterations"])
        if j.get("events"):
            r["label"] += " (events)"
        figures(j, r)
        for k in ("ratio_vs_tcp", "ratio_baseline", "ratios_vs_tcp", "lat_ratios_vs_tcp", "paired"):
            if k in j:
                r[k] = j[k]
        out.append(r)
    return out


def fi(raw, cmd, size):
    """fi_pingpong's table: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec.

    usec/xfer is the time of the run over 2 x iterations transfers, i.e. half a round
    trip (an average); the bandwidth is recomputed from it (size / usec/xfer) in MiB/s,
    since fi_pingpong's own MB/sec column counts 10^6 octets.
    """
    for line in raw.splitlines():
        f = line.split()
        if len(f) == 8 and f[0][0].isdigit():
            usec = float(f[6])
            base = {"system": "libfabric-tcp", "test": "fi_pingpong", "bytes": size,
                    "iterations": f[1], "cmd": cmd}
            return [
                dict(base, label="libfabric tcp fi_pingpong", metric="lat", lat_us=usec,
                     lat_kind="one-way", lat_stat="average"),
                dict(base, label="libfabric tcp fi_pingpong (ping-pong: 1 message in flight)",
                     metric="bw", bw_mib_s=size / (usec * 1e-6) / MIB),
            ]
    sys.exit("collect.py: no result line in fi_pingpong's output")


def ucx(raw, cmd, size, test, label, lat_kind):
    """ucx_perftest -f -v: a CSV header and one line of final numbers.

    Latency tests (tag_lat, ucp_put_lat) are ping-pongs and ucx_perftest already halves
    the round trip; the 50th percentile is taken (as softrnic's t_typical). Bandwidth
    is overall_bw, in MiB/s (UCX's MB is 2^20 octets). ucp_get with one operation
    outstanding is taken as a latency (the whole operation: a round trip).
    """
    lines = [l.strip() for l in raw.splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if l.startswith("iterations,") and i + 1 < len(lines):
            keys = l.split(",")
            vals = [v.strip() for v in lines[i + 1].split(",")]
            d = dict(zip(keys, vals))
            pct = next(k for k in keys if k.endswith("_percentile_lat"))
            r = {"system": "ucx-tcp", "label": label or f"UCX tcp {test}", "test": test,
                 "bytes": size, "iterations": int(d["iterations"]), "cmd": cmd}
            if lat_kind:
                r.update(metric="lat", lat_us=float(d[pct]), lat_stat="median",
                         lat_kind=lat_kind, lat_avg_us=float(d["avg_lat"]))
            else:
                r.update(metric="bw", bw_mib_s=float(d["overall_bw"]),
                         msg_rate_mpps=float(d["overall_mr"]) / 1e6)
            return [r]
    sys.exit("collect.py: no CSV result in ucx_perftest's output")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["softrnic", "fi", "ucx"])
    p.add_argument("raw", help="raw output of the tool")
    p.add_argument("out", help="results file to append to (JSON Lines)")
    p.add_argument("--cmd", required=True)
    p.add_argument("--bytes", type=int)
    p.add_argument("--test")
    p.add_argument("--label")
    p.add_argument("--lat-kind", choices=["one-way", "round trip"])
    a = p.parse_args()
    with open(a.raw) as f:
        raw = f.read()
    if a.kind == "softrnic":
        rows = softrnic(raw, a.cmd)
    elif a.kind == "fi":
        rows = fi(raw, a.cmd, a.bytes)
    else:
        rows = ucx(raw, a.cmd, a.bytes, a.test, a.label, a.lat_kind)
    if not rows:
        sys.exit(f"collect.py: no result in {a.raw}")
    with open(a.out, "a") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    for r in rows:
        v = f"{r['bw_mib_s']:.1f} MiB/s" if r["metric"] == "bw" else \
            f"{r['lat_us']:.2f} us ({r['lat_kind']}, {r['lat_stat']})"
        print(f"    {r['label']:<58} {r['bytes']:>8} B  {v}", file=sys.stderr)


if __name__ == "__main__":
    main()
