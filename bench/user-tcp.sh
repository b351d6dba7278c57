#!/usr/bin/env bash
# softrnic's own TCP on the in-process simulated network against kernel TCP, in one
# run: `softrnic write_bw --loopback -s 64K,1M` with --transport kernel, user:sim, and
# user:sim with --loss 1% --reorder 5%, alternating, ROUNDS times each. Prints the
# median bandwidth per size and transport, the ratios the targets name (user:sim /
# kernel, lossy / clean), and the own TCP's retransmissions and timeouts.
#
# Environment: ROUNDS=3, DURATION=2 (seconds per size), SIZES=64K,1M,
# OUT=target/bench/user-tcp (raw JSON lines and the table).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-2}"
SIZES="${SIZES:-64K,1M}"
OUT="${OUT:-target/bench/user-tcp}"
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl

cargo build --release -q -p softrnic-cli
BIN=target/release/softrnic

for r in $(seq "$ROUNDS"); do
    for kind in kernel sim lossy; do
        case "$kind" in
            kernel) args=(--transport kernel) ;;
            sim) args=(--transport user:sim) ;;
            lossy) args=(--transport user:sim --loss 1% --reorder 5% --seed "$r") ;;
        esac
        echo "==> round $r: $kind" >&2
        "$BIN" write_bw --loopback -s "$SIZES" -D "$DURATION" --json --quiet "${args[@]}" \
            >>"$OUT/$kind.jsonl"
    done
done

python3 - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, statistics, sys, os
out = sys.argv[1]
rows = {}
for kind in ("kernel", "sim", "lossy"):
    for line in open(os.path.join(out, kind + ".jsonl")):
        v = json.loads(line)
        rows.setdefault((kind, v["bytes"]), []).append(v)
sizes = sorted({s for (_, s) in rows})
med = lambda k, s: statistics.median(v["bw_average"] for v in rows[(k, s)])
print("| size | kernel MB/s | user:sim MB/s | user:sim / kernel | lossy MB/s | lossy / user:sim | lossy retransmitted | lossy fast rtx | lossy timeouts |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for s in sizes:
    k, u, l = med("kernel", s), med("sim", s), med("lossy", s)
    t = [v["own_tcp"] for v in rows[("lossy", s)]]
    rtx = "/".join(str(x["retransmitted_segments"]) for x in t)
    fast = "/".join(str(x["fast_retransmits"]) for x in t)
    tos = "/".join(str(x["timeouts"]) for x in t)
    print(f"| {s // 1024} KiB | {k:.0f} | {u:.0f} | {u / k:.2f} | {l:.0f} | {l / u:.2f} | {rtx} | {fast} | {tos} |")
PY
