"""Traces one steady-state message from `receive::feed`'s return to the return of
the `Cq::poll` that read it, instruction by instruction, each with its source file and
line (docs/ARCHITECTURE.md, "Session 28: from the placed message to the caller"): the
part of a side's critical path between the message's placement and the program. gdb
steps one thread with the others stopped; the count does not depend on the load.

    gdb -q -batch -ex "rbreak ^softrnic_rnic::receive::feed(<.*>)?\$" \\
        -ex "run send_lat --loopback -s 8 -n 4000 --quiet > /dev/null" \\
        -ex "ignore 1 2000" -x bench/feed-to-caller.py target/release/softrnic 2>/dev/null \\
        | grep '^TR'

Each line: index, address, file:line, instruction; the last says how many.
"""
import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("continue")
gdb.execute("set scheduler-locking on")
# The caller of `Cq::poll`: the trace ends when control is back there.
f = gdb.newest_frame()
while f is not None and "Cq::poll" not in str(f.name()):
    f = f.older()
back = f.older()
ret_pc, ret_sp = back.pc(), int(f.read_register("rsp"))
gdb.execute("finish", to_string=True)
arch = gdb.selected_inferior().architecture()
lines = []
for n in range(5000):
    pc = int(gdb.parse_and_eval("$pc"))
    sp = int(gdb.parse_and_eval("$sp"))
    if pc == ret_pc and sp > ret_sp:
        lines.append("TR %d instructions from feed's return to Cq::poll's" % n)
        break
    insn = arch.disassemble(pc)[0]["asm"].strip()
    sal = gdb.find_pc_line(pc)
    where = sal.symtab.filename.split("/")[-1] if sal.symtab else "?"
    lines.append("TR %4d %x %s:%s  %s" % (n, pc, where, sal.line, insn))
    gdb.execute("stepi", to_string=True)
gdb.execute("set scheduler-locking off")
print("\n".join(lines))
