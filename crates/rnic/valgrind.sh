#!/usr/bin/env bash
# Runs the softrnic-rnic unit tests (the lib test binary) under valgrind.
#
#   crates/rnic/valgrind.sh                  # memcheck, all unit tests
#   crates/rnic/valgrind.sh region::         # memcheck, tests whose name matches
#   TOOL=helgrind crates/rnic/valgrind.sh cq_ring::
#   TOOL=drd crates/rnic/valgrind.sh cq_ring::
#
# Extra arguments go to the test binary (test-name filters, --exact, ...). Tests run
# one at a time (--test-threads=1) so reports are attributable; tests that spawn
# their own threads still run them concurrently under valgrind's scheduler.
# SOFTRNIC_RING_STRESS overrides the pushes per producer of the ring stress test
# (100000 by default; the full suite takes a few seconds under memcheck).
# helgrind and drd know pthread primitives, not C11 atomics or the futex-based locks
# of Rust's std, so on this code they report std internals and the ring's
# acquire/release hand-offs as races: read their output, do not gate on it. The
# ring's synchronisation is checked by the loom tests (tests/loom_cq_ring.rs).
# Exit status is non-zero when valgrind reports an error or a definite leak, or a
# test fails.
set -euo pipefail

tool="${TOOL:-memcheck}"
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here"

command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

# Build the lib test binary and pick its path from cargo's JSON messages.
bin="$(cargo test -p softrnic-rnic --lib --no-run --message-format=json 2>/dev/null |
    grep '"profile":{[^}]*"test":true' |
    grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4)"
if [[ -z "$bin" || ! -x "$bin" ]]; then
    echo "could not find the softrnic-rnic unit test binary" >&2
    exit 2
fi

case "$tool" in
memcheck)
    opts=(--tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect
        --errors-for-leak-kinds=definite,indirect)
    ;;
helgrind | drd)
    opts=(--tool="$tool")
    ;;
*)
    echo "TOOL must be memcheck, helgrind or drd" >&2
    exit 2
    ;;
esac

echo "valgrind $tool: $bin" >&2
exec valgrind "${opts[@]}" --error-exitcode=1 "$bin" --test-threads=1 "$@"
