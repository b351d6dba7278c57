#!/bin/sh
# Completion handlers: events per second with 1 and 2 handlers, and a high-priority
# probe's wake-up latency idle, beside bulk events at a higher and at an equal priority.
# One JSON line per run, labelled; RUNS runs of each configuration, alternating.
# Usage: bench/cq-bench.sh [> results.jsonl]    (RUNS=3, DURATION=2 by default)
set -eu
cd "$(dirname "$0")/.."
cargo build --release -q -p softrnic-cli
B=target/cq-bench-softrnic
cp target/release/softrnic "$B"
RUNS=${RUNS:-3}
D=${DURATION:-2}
# The second CPU: the sending side of the "split" runs.
OTHER=$(python3 -c 'import os; c=sorted(os.sched_getaffinity(0)); print(c[1] if len(c) > 1 else c[0])')
i=0
while [ "$i" -lt "$RUNS" ]; do
  i=$((i + 1))
  while read -r label args; do
    # shellcheck disable=SC2086
    printf '{"label":"%s","run":%s,"result":%s}\n' "$label" "$i" "$("$B" cq-bench -D "$D" --json $args)"
  done <<CONFIGS
one-handler-senders-with-it   --handlers 1 --cqs 16
one-handler-senders-elsewhere --handlers 1 --cqs 16 --sender-cpus $OTHER
two-handlers                  --handlers 2 --cqs 16
probe-idle                    --handlers 1 --cqs 0 --probe-priority 255 --sender-cpus $OTHER
probe-above-bulk              --handlers 1 --cqs 64 --probe-priority 255 --sender-cpus $OTHER
probe-equal-to-bulk           --handlers 1 --cqs 64 --probe-priority 0 --sender-cpus $OTHER
CONFIGS
done
