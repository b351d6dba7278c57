"""Counts the instructions of one steady-state `Qp::post_send`, natively: from its
entry to the `syscall` instruction that sends, and to its return (docs/ARCHITECTURE.md,
"Per-message cost", twelfth round). gdb steps one thread with the others stopped; the
count does not depend on the machine's load.

    gdb -q -batch -ex "break *softrnic_rnic::qp::verbs::Qp::post_send" \
        -ex "run write_lat --loopback -s 8 -n 4000 --quiet > /dev/null" \
        -ex "ignore 1 2000" -x bench/post-steps.py target/release/softrnic 2>/dev/null \
        | grep '^CALL'

POSTS (environment, default 4) posts are counted, each after the first 2,000.
"""
import os

import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")


def count_one():
    """Steps from the entry (the breakpoint) to the return at the entry's stack depth;
    returns (instructions before the first `syscall`, instructions in all)."""
    sp0 = int(gdb.parse_and_eval("$sp"))
    arch = gdb.selected_inferior().architecture()
    gdb.execute("set scheduler-locking step")
    n, before = 0, None
    while n < 5000:
        insn = arch.disassemble(int(gdb.parse_and_eval("$pc")))[0]["asm"].strip()
        if before is None and insn.startswith("syscall"):
            before = n
        if insn.startswith("ret") and int(gdb.parse_and_eval("$sp")) == sp0:
            n += 1
            break
        gdb.execute("stepi", to_string=True)
        n += 1
    gdb.execute("set scheduler-locking off")
    return before, n


for _ in range(int(os.environ.get("POSTS", "4"))):
    gdb.execute("continue", to_string=True)
    b, t = count_one()
    print("CALL before_syscall=%s total=%s" % (b, t))
gdb.execute("kill")
