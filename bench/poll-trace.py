"""Traces one `Cq::poll` instruction by instruction (docs/ARCHITECTURE.md, "Session 28:
from the read to the receive path"). gdb steps one thread with the others stopped, so
the trace does not depend on the load. MODE=empty (the default) keeps the first poll
that made a `recvfrom` answered `EAGAIN` through a marked drive (no `consumer_pass` in
it), from entry to return; MODE=msg keeps the first poll whose `recvfrom` returned data,
up to `receive::feed`'s entry (the lines after `TR RAX` are the read's return path).

    MODE=empty gdb -q -batch -ex "break *softrnic_rnic::cq::Cq::poll" \\
        -ex "run write_lat --loopback -s 8 -n 40000 --quiet > /dev/null" \\
        -ex "ignore 1 3000" -x bench/poll-trace.py target/release/softrnic 2>/dev/null \\
        | grep '^TR'

Each line: index, address, file:line, function, instruction.
"""
import gdb, os
mode = os.environ.get("MODE", "empty")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
arch = gdb.selected_inferior().architecture()

def trace():
    sp0 = int(gdb.parse_and_eval("$sp"))
    lines = []
    got = None
    for n in range(5000):
        pc = int(gdb.parse_and_eval("$pc"))
        insn = arch.disassemble(pc)[0]["asm"].strip()
        sal = gdb.find_pc_line(pc)
        where = sal.symtab.filename.split("/")[-1] if sal.symtab else "?"
        fn = gdb.block_for_pc(pc).function if gdb.block_for_pc(pc) else None
        lines.append("TR %4d %x %s:%s %s  %s" % (n, pc, where, sal.line, fn, insn))
        if mode == "msg" and fn is not None and str(fn) == "softrnic_rnic::receive::feed":
            return lines, "feed"
        was_sys = insn.startswith("syscall")
        gdb.execute("stepi", to_string=True)
        if was_sys:
            got = int(gdb.parse_and_eval("$rax"))
            lines.append("TR RAX %d" % got)
            if mode == "msg" and got <= 0:
                return lines, "empty"
        if int(gdb.parse_and_eval("$sp")) > sp0:
            return lines, ("ret" if got is not None and got < 0 else "retnosys")
    return lines, "long"
for attempt in range(3000):
    gdb.execute("continue")
    gdb.execute("set scheduler-locking step")
    lines, why = trace()
    gdb.execute("set scheduler-locking off")
    if mode == "empty" and why == "ret" and not any("consumer_pass" in l for l in lines) or mode == "msg" and why == "feed":
        print("\n".join(lines))
        print("TR END %s attempt %d" % (why, attempt))
        break
