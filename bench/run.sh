#!/usr/bin/env bash
# Side-by-side benchmark on this machine, in one run: softrnic (the six perftest-style
# tests), the plain TCP baselines of the softrnic CLI (blocking, busy-polling, batching), libfabric's tcp provider
# (fi_pingpong) and UCX over TCP (ucx_perftest), at 64 B, 4 KiB, 64 KiB and 1 MiB, each
# pair of sides pinned to CPUs 0 and 1. Writes target/bench/results.{jsonl,md,png}.
# See bench/README.md.
#
# Environment:
#   DURATION=2          seconds per size and test (softrnic's -D; the peers' iteration
#                       counts are chosen to take about as long)
#   SYSTEMS="softrnic libfabric ucx"   which systems to run (the TCP baselines come
#                       with softrnic)
#   OUT=target/bench    where results go
#   SAVE_AS=NAME        also copy the table, plot and results to bench/results/NAME.*
#   NO_INSTALL=1        do not apt-get / pip install anything
#   CPU_SERVER=0 CPU_CLIENT=1          the CPUs the two sides are pinned to
#   PORT_BASE=18620     first of the TCP ports used (softrnic: +0, +1; fi_pingpong: +10;
#                       ucx_perftest: +20)
#   PAIRS=0             softrnic's polling runs (bandwidth and latency) add `--pairs N`:
#                       after each size's headline, N alternating pairs of busy-polling
#                       TCP and softrnic sub-runs (JSON `paired`; the raw output keeps
#                       each pair's figures); the ratios that survive the machine's
#                       drift between the headline's TCP and softrnic runs. 0: none
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

DURATION="${DURATION:-2}"
SYSTEMS="${SYSTEMS:-softrnic libfabric ucx}"
OUT="${OUT:-target/bench}"
CPU_SERVER="${CPU_SERVER:-0}"
CPU_CLIENT="${CPU_CLIENT:-1}"
PORT_BASE="${PORT_BASE:-18620}"
PAIRS="${PAIRS:-0}"
SIZES=(64 4096 65536 1048576)
SIZES_CSV="64,4K,64K,1M"

RAW="$OUT/raw"
RESULTS="$OUT/results.jsonl"
SKIPS="$OUT/skipped.txt"
mkdir -p "$RAW"
rm -f "$RAW"/* "$RESULTS" "$SKIPS" "$OUT/results.md" "$OUT/results.png"

say() { printf '==> %s\n' "$*" >&2; }
skip() { printf '\n******** SKIPPED: %s ********\n\n' "$*" >&2; echo "$*" >>"$SKIPS"; }
has() { command -v "$1" >/dev/null 2>&1; }
# iters RATE: RATE operations per second for DURATION seconds (at least 20).
iters() { awk -v r="$1" -v d="$DURATION" 'BEGIN { n = int(r * d); if (n < 20) n = 20; print n }'; }
secs() { awk -v a="$1" -v d="$DURATION" 'BEGIN { print int(a * d) + 60 }'; }

# Servers started in the background, ended on exit if still there (by pid only).
SERVERS=()
SAMPLER=""
cleanup() {
    local p
    for p in "${SERVERS[@]}" $SAMPLER; do
        kill "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT

if [ "$(nproc)" -lt 2 ]; then
    echo "run.sh: needs 2 CPUs to pin the two sides apart (this machine has $(nproc))" >&2
    exit 1
fi

# ---------------------------------------------------------------------------- setup
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if has sudo && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO="none"; fi
fi
apt_install() { # apt_install PKG...: true if installed
    [ -n "${NO_INSTALL:-}" ] && return 1
    [ "$SUDO" = none ] && return 1
    has apt-get || return 1
    say "apt-get install -y $*"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$@" >"$RAW/apt.log" 2>&1 && return 0
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get update -q >>"$RAW/apt.log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "$@" >>"$RAW/apt.log" 2>&1
}

want() { case " $SYSTEMS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if want libfabric && ! has fi_pingpong; then
    apt_install libfabric-bin || true
fi
if want ucx && ! has ucx_perftest; then
    apt_install ucx-utils || true
fi

# matplotlib: the system's python, else a venv under $OUT, else pip --user.
PY=""
if python3 -c 'import matplotlib' 2>/dev/null; then
    PY=python3
elif [ -x "$OUT/venv/bin/python" ] && "$OUT/venv/bin/python" -c 'import matplotlib' 2>/dev/null; then
    PY="$OUT/venv/bin/python"
fi
if [ -z "$PY" ] && [ -z "${NO_INSTALL:-}" ]; then
    say "installing matplotlib into $OUT/venv"
    if python3 -m venv "$OUT/venv" >"$RAW/pip.log" 2>&1 &&
        "$OUT/venv/bin/pip" install -q matplotlib >>"$RAW/pip.log" 2>&1; then
        PY="$OUT/venv/bin/python"
    elif python3 -m pip install -q --user matplotlib >>"$RAW/pip.log" 2>&1 &&
        python3 -c 'import matplotlib' 2>/dev/null; then
        PY=python3
    fi
fi
PLOT_ARGS=()
if [ -z "$PY" ]; then
    skip "PNG plot: matplotlib is missing and could not be installed (see $RAW/pip.log); the table is still written"
    PY=python3
    PLOT_ARGS+=(--no-png)
fi

say "cargo build --release -p softrnic-cli"
cargo build --release -p softrnic-cli >&2
# A copy, so that a rebuild in this tree during the run does not swap the binary.
BIN="$OUT/softrnic"
cp target/release/softrnic "$BIN"

# ---------------------------------------------------------------------------- the machine
busy_pct() { # CPU busy over one second, whole machine
    local a b
    a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
    awk -v u=$((b[1] + b[2] + b[3] + b[6] + b[7] - a[1] - a[2] - a[3] - a[6] - a[7])) \
        -v t=$((b[1] + b[2] + b[3] + b[4] + b[5] + b[6] + b[7] - a[1] - a[2] - a[3] - a[4] - a[5] - a[6] - a[7])) \
        'BEGIN { printf "%.0f", t ? 100 * u / t : 0 }'
}
BUSY_BEFORE="$(busy_pct)"
if [ "$BUSY_BEFORE" -gt 20 ]; then
    printf '\nWARNING: the machine is %s%% busy before the run (other work on the 2 CPUs): numbers will be disturbed\n\n' "$BUSY_BEFORE" >&2
fi
# Samples, once a second, whether a compiler or linker is running beside the benchmark.
(while sleep 1; do
    if pgrep -x rustc >/dev/null || pgrep -x cc1 >/dev/null || pgrep -x ld >/dev/null || pgrep -x cargo >/dev/null; then
        echo busy
    else
        echo idle
    fi
done >"$RAW/compiler-samples.txt") &
SAMPLER=$!
# CPU ticks: the whole machine's user+nice+system, and this script's with its waited-for
# children (every test runs as one); the difference at the end is other processes' work.
ticks() {
    local m o
    m=$(awk '/^cpu / { print $2 + $3 + $4 }' /proc/stat)
    o=$(sed 's/.*) //' /proc/$$/stat | awk '{ print $12 + $13 + $14 + $15 }')
    echo "$m $o"
}
read -r M0 O0 <<<"$(ticks)"
START="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
T0=$SECONDS

ver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo "?"; }
REV="$(git rev-parse --short HEAD 2>/dev/null || echo '?')"
git diff --quiet HEAD -- crates 2>/dev/null || REV="$REV+uncommitted changes"

# wait_listen PORT PID: until PORT is listened on (or the server has died).
wait_listen() {
    local i
    for i in $(seq 100); do
        ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.05
    done
    return 1
}

# pair NAME PORT TIMEOUT SERVER_CMD... -- CLIENT_CMD...: the server on CPU_SERVER, the
# client on CPU_CLIENT; the client's output goes to $RAW/NAME.out. False on failure.
pair() {
    local name="$1" port="$2" tmo="$3"; shift 3
    local srv=() rc=0 spid
    while [ "$1" != "--" ]; do srv+=("$1"); shift; done
    shift
    timeout "$((tmo + 10))" taskset -c "$CPU_SERVER" "${srv[@]}" >"$RAW/$name.server" 2>&1 &
    spid=$!
    SERVERS+=("$spid")
    if ! wait_listen "$port" "$spid"; then
        echo "    server did not start: $(tail -2 "$RAW/$name.server" | tr '\n' ' ')" >&2
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        return 1
    fi
    timeout "$tmo" taskset -c "$CPU_CLIENT" "$@" >"$RAW/$name.out" 2>&1 || rc=$?
    # The server ends by itself after one test; give it a moment, then end it.
    for _ in $(seq 40); do kill -0 "$spid" 2>/dev/null || break; sleep 0.05; done
    kill "$spid" 2>/dev/null || true
    wait "$spid" 2>/dev/null || true
    if [ "$rc" -ne 0 ]; then
        echo "    client failed (exit $rc): $(tail -3 "$RAW/$name.out" | tr '\n' ' ')" >&2
        return 1
    fi
}

# ---------------------------------------------------------------------------- softrnic + TCP
if want softrnic; then
    P="$PORT_BASE"
    # Every test with its own TCP baselines (blocking, busy-polling and, for the
    # streams, batching), run right before each size; the ratio is against the
    # strongest of them.
    # PAIRS=N adds the paired sub-runs after each headline (bandwidth and latency).
    # They add about two headline runs per size (busy-polling TCP, softrnic): more time.
    pairs=()
    tmo="$(secs 20)"
    if [ "$PAIRS" -gt 0 ]; then pairs=(--pairs "$PAIRS"); tmo="$(secs 28)"; fi
    for t in write_bw read_bw send_bw write_lat send_lat read_lat; do
        cmd=(softrnic "$t" --loopback --baseline tcp --json --quiet -s "$SIZES_CSV" -D "$DURATION" -p "$P" ${pairs[@]+"${pairs[@]}"})
        say "${cmd[*]}"
        if timeout "$tmo" "$BIN" "${cmd[@]:1}" >"$RAW/softrnic_$t.out" 2>"$RAW/softrnic_$t.err"; then
            "$PY" bench/collect.py softrnic "$RAW/softrnic_$t.out" "$RESULTS" --cmd "${cmd[*]}"
        else
            skip "softrnic $t failed: $(tail -3 "$RAW/softrnic_$t.err" | tr '\n' ' ')"
        fi
    done
    # Event-driven: both sides sleep on completion events (no spinning anywhere),
    # against the TCP baselines that do not spin either; for the CPU a program pays
    # when it cannot give a core to polling.
    for t in write_bw send_lat read_lat; do
        cmd=(softrnic "$t" -e --loopback --baseline tcp --json --quiet -s "$SIZES_CSV" -D "$DURATION" -p "$P")
        say "${cmd[*]}"
        if timeout "$(secs 20)" "$BIN" "${cmd[@]:1}" >"$RAW/softrnic_${t}_e.out" 2>"$RAW/softrnic_${t}_e.err"; then
            "$PY" bench/collect.py softrnic "$RAW/softrnic_${t}_e.out" "$RESULTS" --cmd "${cmd[*]}"
        else
            skip "softrnic $t -e failed: $(tail -3 "$RAW/softrnic_${t}_e.err" | tr '\n' ' ')"
        fi
    done
fi

# ---------------------------------------------------------------------------- libfabric tcp
if want libfabric; then
    if ! has fi_pingpong; then
        skip "libfabric tcp: fi_pingpong not found (Debian package libfabric-bin; apt-get install failed or was not allowed)"
    elif ! fi_info -p tcp >/dev/null 2>&1; then
        skip "libfabric tcp: fi_info -p tcp finds no tcp provider"
    else
        P=$((PORT_BASE + 10))
        # Round trips per second here, roughly, to size the iteration counts.
        declare -A FI_RATE=([64]=50000 [4096]=40000 [65536]=7000 [1048576]=700)
        for s in "${SIZES[@]}"; do
            n="$(iters "${FI_RATE[$s]}")"
            # -e msg: the tcp provider's own connected endpoints (the default, dgram, is
            # not offered by tcp; rdm would go through the ofi_rxm layer).
            scmd=(fi_pingpong -p tcp -e msg -B "$P" -S "$s" -I "$n")
            ccmd=(fi_pingpong -p tcp -e msg -P "$P" -S "$s" -I "$n" 127.0.0.1)
            say "taskset -c $CPU_SERVER ${scmd[*]} & taskset -c $CPU_CLIENT ${ccmd[*]}"
            if pair "fi_pingpong_$s" "$P" "$(secs 3)" "${scmd[@]}" -- "${ccmd[@]}"; then
                "$PY" bench/collect.py fi "$RAW/fi_pingpong_$s.out" "$RESULTS" --bytes "$s" \
                    --cmd "taskset -c $CPU_SERVER ${scmd[*]} & taskset -c $CPU_CLIENT ${ccmd[*]}"
            else
                skip "libfabric tcp fi_pingpong at $s B failed (see $RAW/fi_pingpong_$s.*)"
            fi
        done
    fi
fi

# ---------------------------------------------------------------------------- UCX over TCP
if want ucx; then
    if ! has ucx_perftest; then
        skip "UCX over TCP: ucx_perftest not found (Debian package ucx-utils; apt-get install failed or was not allowed)"
    else
        export UCX_TLS=tcp UCX_NET_DEVICES=lo
        P=$((PORT_BASE + 20))
        # test | extra flags | label | latency kind (empty: bandwidth) | ops/s at 64 4K 64K 1M
        UCX_TESTS=(
            "tag_bw||UCX tcp tag_bw||150000 100000 25000 3000"
            "ucp_put_bw||UCX tcp ucp_put_bw||100000 60000 10000 300"
            "ucp_get|-O 128|UCX tcp ucp_get (128 outstanding)||100000 20000 5000 400"
            "tag_lat||UCX tcp tag_lat|one-way|50000 25000 4000 500"
            "ucp_put_lat||UCX tcp ucp_put_lat|one-way|30000 15000 2000 100"
            "ucp_get|-O 1|UCX tcp ucp_get (1 outstanding)|round trip|800 800 700 450"
        )
        for spec in "${UCX_TESTS[@]}"; do
            IFS='|' read -r t extra label lk rates <<<"$spec"
            read -r -a rate <<<"$rates"
            failed=0
            for i in "${!SIZES[@]}"; do
                s="${SIZES[$i]}"
                n="$(iters "${rate[$i]}")"
                w=$((n / 10 < 10 ? 10 : n / 10))
                read -r -a xf <<<"$extra"
                scmd=(ucx_perftest -p "$P")
                ccmd=(ucx_perftest 127.0.0.1 -p "$P" -t "$t" "${xf[@]}" -s "$s" -n "$n" -w "$w" -f -v)
                shown="UCX_TLS=tcp UCX_NET_DEVICES=lo taskset -c $CPU_SERVER ${scmd[*]} & taskset -c $CPU_CLIENT ${ccmd[*]}"
                say "$shown"
                name="ucx_${t}${extra// /}_$s"
                if pair "$name" "$P" "$(secs 3)" "${scmd[@]}" -- "${ccmd[@]}"; then
                    "$PY" bench/collect.py ucx "$RAW/$name.out" "$RESULTS" --bytes "$s" \
                        --test "$t" --label "$label" ${lk:+--lat-kind "$lk"} --cmd "$shown"
                else
                    skip "UCX over TCP $t $extra at $s B failed (see $RAW/$name.*)"
                fi
            done
        done
    fi
fi

# ---------------------------------------------------------------------------- table and plot
kill "$SAMPLER" 2>/dev/null || true
wait "$SAMPLER" 2>/dev/null || true
SAMPLER=""
read -r M1 O1 <<<"$(ticks)"
HZ=$(getconf CLK_TCK)
OTHER_PCT=$(awk -v m=$((M1 - M0)) -v o=$((O1 - O0)) -v hz="$HZ" -v t=$((SECONDS - T0)) -v n="$(nproc)" \
    'BEGIN { x = (m - o) / hz; if (x < 0) x = 0; printf "%.0f", t ? 100 * x / (t * n) : 0 }')
COMPILER_BUSY="$(grep -c busy "$RAW/compiler-samples.txt" || true)"
SAMPLES="$(wc -l <"$RAW/compiler-samples.txt")"
cat >"$OUT/meta.json" <<EOF
{
  "start_utc": "$START",
  "wall_seconds": $((SECONDS - T0)),
  "duration_per_size_s": $DURATION,
  "cpus": $(nproc),
  "cpu_model": "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)",
  "kernel": "$(uname -r)",
  "pinning": "server side on CPU $CPU_SERVER, client side on CPU $CPU_CLIENT",
  "softrnic_rev": "$REV",
  "libfabric": "$(ver libfabric1)",
  "ucx": "$(ver libucx0)",
  "busy_before_pct": $BUSY_BEFORE,
  "other_cpu_pct": $OTHER_PCT,
  "compiler_seconds": ${COMPILER_BUSY:-0},
  "sampled_seconds": ${SAMPLES:-0}
}
EOF
if [ "${COMPILER_BUSY:-0}" -gt 0 ] || [ "$OTHER_PCT" -gt 5 ]; then
    printf '\nWARNING: other processes took %s%% of the CPUs during the run (a compiler or linker ran for %s of %s s): numbers are disturbed\n' \
        "$OTHER_PCT" "$COMPILER_BUSY" "$SAMPLES" >&2
fi

"$PY" bench/plot.py "$OUT" "${PLOT_ARGS[@]}"

if [ -n "${SAVE_AS:-}" ]; then
    mkdir -p bench/results
    cp "$OUT/results.md" "bench/results/$SAVE_AS.md"
    cp "$RESULTS" "bench/results/$SAVE_AS.jsonl"
    [ -f "$OUT/results.png" ] && cp "$OUT/results.png" "bench/results/$SAVE_AS.png"
    say "copied to bench/results/$SAVE_AS.*"
fi
if [ -s "$SKIPS" ]; then
    echo >&2
    sed 's/^/SKIPPED: /' "$SKIPS" >&2
fi
say "done in $((SECONDS - T0)) s: $OUT/results.md, $OUT/results.png"
