#!/usr/bin/env python3
"""Table and plot of one bench/run.sh run.

    plot.py DIR [--no-png]

Reads DIR/results.jsonl (written by collect.py), DIR/meta.json and DIR/skipped.txt;
writes DIR/results.md (also printed on stdout) and DIR/results.png: bandwidth and
latency against message size, one line per system and test.
"""

import argparse
import json
import os
import sys
from collections import OrderedDict

SIZES = [64, 4096, 65536, 1 << 20]

# Order of the rows and lines; labels not listed come after, in file order.
ORDER = [
    "softrnic write_bw", "softrnic read_bw", "softrnic send_bw",
    "TCP stream, blocking (baseline)", "TCP stream, busy-poll (baseline)",
    "TCP stream, batching (baseline)",
    "UCX tcp tag_bw", "UCX tcp ucp_put_bw", "UCX tcp ucp_get (128 outstanding)",
    "libfabric tcp fi_pingpong (ping-pong: 1 message in flight)",
    "softrnic write_lat", "softrnic send_lat", "softrnic read_lat",
    "TCP ping-pong, busy-poll (baseline)", "TCP ping-pong, blocking (baseline)",
    "TCP request/response, busy-poll (baseline)", "TCP request/response, blocking (baseline)",
    "UCX tcp tag_lat", "UCX tcp ucp_put_lat", "UCX tcp ucp_get (1 outstanding)",
    "libfabric tcp fi_pingpong",
]

BASELINE_NAMES = {"blocking": "blocking", "busy_poll": "busy-poll", "batching": "batching"}

def human(s):
    if s >= 1 << 20 and s % (1 << 20) == 0:
        return f"{s >> 20} MiB"
    if s >= 1 << 10 and s % (1 << 10) == 0:
        return f"{s >> 10} KiB"
    return f"{s} B"


def fmt_bw(v):
    return "-" if v is None else (f"{v:,.0f}" if v >= 100 else f"{v:.1f}")


def fmt_lat(v):
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else (f"{v:.1f}" if v < 1000 else f"{v:,.0f}")


def load(d):
    rows = []
    with open(os.path.join(d, "results.jsonl")) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    meta = {}
    p = os.path.join(d, "meta.json")
    if os.path.exists(p):
        with open(p) as f:
            meta = json.load(f)
    skipped = []
    p = os.path.join(d, "skipped.txt")
    if os.path.exists(p):
        with open(p) as f:
            skipped = [l.strip() for l in f if l.strip()]
    return rows, meta, skipped


def series(rows, metric):
    """label -> {"rows": {bytes: row}, ...} in ORDER."""
    out = {}
    for r in rows:
        # A companion baseline (the same TCP pattern run beside another softrnic test)
        # only serves that test's ratios.
        if r["metric"] != metric or r.get("companion"):
            continue
        s = out.setdefault(r["label"], {"system": r["system"], "test": r["test"], "rows": {}})
        s["rows"][r["bytes"]] = r
    rank = {l: i for i, l in enumerate(ORDER)}
    return OrderedDict(sorted(out.items(), key=lambda kv: rank.get(kv[0], len(ORDER))))


def table(rows, meta, skipped):
    bw, lat = series(rows, "bw"), series(rows, "lat")
    heads = " | ".join(human(s) for s in SIZES)
    rule = "|".join(["---"] * len(SIZES))
    L = []
    date = meta.get("start_utc", "?")
    L.append(f"# softrnic side by side: {date[:10]}")
    L.append("")
    L.append(
        f"One machine, one run ({date}, {meta.get('wall_seconds', '?')} s): "
        f"{meta.get('cpus', '?')} x {meta.get('cpu_model', '?')}, kernel {meta.get('kernel', '?')}; "
        f"{meta.get('pinning', '?')}; {meta.get('duration_per_size_s', '?')} s per size and test. "
        f"softrnic {meta.get('softrnic_rev', '?')}, libfabric {meta.get('libfabric', '?')}, "
        f"UCX {meta.get('ucx', '?')}; everything over loopback TCP (127.0.0.1)."
    )
    busy = meta.get("busy_before_pct", 0)
    comp = meta.get("compiler_seconds", 0)
    other = meta.get("other_cpu_pct", 0)
    if comp or busy > 20 or other > 5:
        L.append("")
        L.append(
            f"**Disturbed run**: other processes took {other}% of the machine's CPU time "
            f"during the run (it was {busy}% busy just before; a compiler or linker ran for "
            f"{comp} of {meta.get('sampled_seconds', '?')} s). With 2 CPUs, both taken by the two "
            f"pinned sides, every such process steals time from one side: read the numbers as "
            f"rough."
        )
    L.append("")
    L.append("## Bandwidth, MiB/s (MiB = 2^20 octets), higher is better")
    L.append("")
    L.append(f"| system, test | {heads} |")
    L.append(f"|---|{rule}|")
    for label, s in bw.items():
        vals = " | ".join(fmt_bw(s["rows"].get(b, {}).get("bw_mib_s")) for b in SIZES)
        L.append(f"| {label} | {vals} |")
    L.append("")
    L.append("## Latency, microseconds, lower is better")
    L.append("")
    L.append(f"| system, test | what | {heads} |")
    L.append(f"|---|---|{rule}|")
    for label, s in lat.items():
        r0 = next(iter(s["rows"].values()))
        what = f"{r0['lat_kind']}, {r0['lat_stat']}"
        vals = " | ".join(fmt_lat(s["rows"].get(b, {}).get("lat_us")) for b in SIZES)
        L.append(f"| {label} | {what} | {vals} |")

    # The latency tail: median, average, 99% of softrnic and the TCP ping-pongs
    tail = [(label, s) for label, s in lat.items()
            if s["system"] in ("softrnic", "tcp") and any(
                r.get("lat_p99_us") is not None for r in s["rows"].values())]
    if tail:
        L.append("")
        L.append("## Latency tail, microseconds: median / average / 99%")
        L.append("")
        L.append(f"| system, test | {heads} |")
        L.append(f"|---|{rule}|")
        for label, s in tail:
            cells = []
            for b in SIZES:
                r = s["rows"].get(b)
                cells.append("-" if r is None else " / ".join(
                    fmt_lat(r.get(k)) for k in ("lat_us", "lat_avg_us", "lat_p99_us")))
            L.append(f"| {label} | {' | '.join(cells)} |")

    # CPU cost: seconds of CPU (user + system, both sides) per GB or per million messages
    cpu = [(label, s) for label, s in list(bw.items()) + list(lat.items())
           if any("cpu_seconds" in r for r in s["rows"].values())]
    if cpu:
        L.append("")
        L.append("## CPU cost: CPU seconds (user + system, both sides) per GB moved (bandwidth) "
                 "or per million messages (latency)")
        L.append("")
        L.append(f"| system, test | per | {heads} |")
        L.append(f"|---|---|{rule}|")
        for label, s in cpu:
            key = "cpu_s_per_gb" if s["rows"] and next(iter(s["rows"].values()))["metric"] == "bw" \
                else "cpu_s_per_mmsg"
            per = "GB" if key == "cpu_s_per_gb" else "M msgs"
            vals = " | ".join(
                "-" if s["rows"].get(b, {}).get(key) is None else f"{s['rows'][b][key]:.3g}"
                for b in SIZES)
            L.append(f"| {label} | {per} | {vals} |")

    # softrnic against TCP: the ratio each run printed, against the strongest baseline
    ratio_lines = []
    for metric, ser in (("bw", bw), ("lat", lat)):
        for label, s in ser.items():
            if s["system"] != "softrnic":
                continue
            cells = []
            for b in SIZES:
                r = s["rows"].get(b)
                if r is None or "ratio_vs_tcp" not in r:
                    cells.append("-")
                    continue
                who = BASELINE_NAMES.get(r.get("ratio_baseline"), r.get("ratio_baseline", "?"))
                cells.append(f"{r['ratio_vs_tcp']:.2f} ({who})")
            if any(c != "-" for c in cells):
                ratio_lines.append(f"| {label} | {' | '.join(cells)} |")
    if ratio_lines:
        L.append("")
        L.append("## softrnic / the strongest TCP baseline")
        L.append("")
        L.append("Each run's ratio against the strongest TCP discipline of the same size (named: "
                 "blocking, busy-poll, batching), run right before it. Bandwidth: above 1, "
                 "softrnic moves more. Latency (t_typical): below 1, softrnic is faster.")
        L.append("")
        L.append(f"| softrnic test | {heads} |")
        L.append(f"|---|{rule}|")
        L.extend(ratio_lines)
    # The 64 B message rate against UCX's tag_bw (issue 12's target: at least 4x)
    ucx = next((s for s in bw.values() if s["system"] == "ucx-tcp" and s["test"] == "tag_bw"),
               None)
    ucx64 = ucx and ucx["rows"].get(64, {}).get("bw_mib_s")
    if ucx64:
        L.append("")
        L.append("## 64 B message rate against UCX tcp tag_bw")
        L.append("")
        rate = ucx64 * 2**20 / 64
        L.append(f"UCX tcp tag_bw at 64 B: {rate / 1e6:.3g} M msg/s. softrnic at 64 B, "
                 "messages per second and the ratio to it (same size, so the ratio of the "
                 "bandwidths):")
        L.append("")
        L.append("| softrnic test | M msg/s | / UCX tag_bw |")
        L.append("|---|---|---|")
        for label, s in bw.items():
            v = s["rows"].get(64, {}).get("bw_mib_s")
            if s["system"] == "softrnic" and v:
                L.append(f"| {label} | {v * 2**20 / 64 / 1e6:.3g} | {v / ucx64:.1f}x |")
    L.append("")
    L.append("Notes: softrnic's latency is perftest's t_typical (the median); UCX's is its "
             "50th percentile (tag_lat and ucp_put_lat are ping-pongs whose round trip "
             "ucx_perftest halves); fi_pingpong only reports an average (usec/xfer, half a round "
             "trip). read_lat, its TCP request/response baseline and ucp_get with one operation "
             "outstanding are whole operations (a round trip). fi_pingpong's bandwidth is that "
             "of a ping-pong (size / half round trip), not of a stream.")
    if skipped:
        L.append("")
        L.append("## Skipped")
        L.append("")
        L.extend(f"- SKIPPED: {s}" for s in skipped)
    cmds = list(OrderedDict.fromkeys(r["cmd"] for r in rows))
    L.append("")
    L.append("<details><summary>Exact commands</summary>")
    L.append("")
    L.append("```sh")
    L.extend(cmds)
    L.append("```")
    L.append("")
    L.append("</details>")
    return "\n".join(L) + "\n"


STYLE = {  # system -> colours of its lines, in order
    "softrnic": ["#08306b", "#2171b5", "#6baed6"],
    "tcp": ["#000000", "#525252", "#969696", "#bdbdbd"],
    "ucx-tcp": ["#a63603", "#e6550d", "#fd8d3c"],
    "libfabric-tcp": ["#238b45", "#74c476"],
}


def marker(test):
    if "get" in test or "read" in test:
        return "s"
    if "put" in test or "write" in test:
        return "o"
    if "pingpong" in test:
        return "D"
    return "^"


def plot(rows, meta, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FixedFormatter, FuncFormatter

    fig, axes = plt.subplots(1, 2, figsize=(15, 6.8))
    for ax, metric in zip(axes, ("bw", "lat")):
        used = {}
        for label, s in series(rows, metric).items():
            pts = sorted(s["rows"].items())
            xs = [b for b, _ in pts]
            key = "bw_mib_s" if metric == "bw" else "lat_us"
            ys = [r[key] for _, r in pts]
            i = used.get(s["system"], 0)
            used[s["system"]] = i + 1
            colours = STYLE.get(s["system"], ["#7a0177"])
            rt = metric == "lat" and pts[0][1].get("lat_kind") == "round trip"
            pingpong_bw = metric == "bw" and s["system"] == "libfabric-tcp"
            name = label + (" [round trip]" if rt else "")
            ax.plot(xs, ys, marker=marker(s["test"]), color=colours[i % len(colours)],
                    linestyle="--" if rt or pingpong_bw else "-",
                    linewidth=2.4 if s["system"] == "softrnic" else 1.6, markersize=6,
                    label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(FixedLocator(SIZES))
        ax.xaxis.set_major_formatter(FixedFormatter([human(s) for s in SIZES]))
        ax.xaxis.set_minor_locator(FixedLocator([]))
        ax.set_xlabel("message size")
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", axis="y", alpha=0.12)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if metric == "bw":
            ax.set_ylabel("bandwidth, MiB/s (log)")
            ax.set_title("Bandwidth (higher is better)")
        else:
            ax.set_ylabel("latency, µs (log): one-way; dashed = round trip")
            ax.set_title("Latency (lower is better)")
        ax.legend(fontsize=8, loc="upper left" if metric == "lat" else "lower right",
                  framealpha=0.9)
    date = meta.get("start_utc", "?")
    sub = (f"one machine, one run ({date}): {meta.get('cpus', '?')} x {meta.get('cpu_model', '?')}, "
           f"{meta.get('pinning', '?')}, loopback TCP, {meta.get('duration_per_size_s', '?')} s per size")
    if meta.get("compiler_seconds") or meta.get("busy_before_pct", 0) > 20 or meta.get("other_cpu_pct", 0) > 5:
        sub += f"; disturbed: other processes took {meta.get('other_cpu_pct', '?')}% of the CPUs"
    fig.suptitle("softrnic vs plain TCP, libfabric tcp and UCX over TCP\n" + sub, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default="target/bench")
    p.add_argument("--no-png", action="store_true", help="the table only (no matplotlib)")
    a = p.parse_args()
    rows, meta, skipped = load(a.dir)
    if not rows:
        sys.exit(f"plot.py: no results in {a.dir}/results.jsonl")
    md = table(rows, meta, skipped)
    with open(os.path.join(a.dir, "results.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    if not a.no_png:
        png = os.path.join(a.dir, "results.png")
        plot(rows, meta, png)
        print(f"\nplot: {png}", file=sys.stderr)


if __name__ == "__main__":
    main()
