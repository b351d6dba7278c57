"""Traces one steady-state `Qp::post_send` instruction by instruction, from its entry
to the first `syscall`, each with its source file and line (docs/ARCHITECTURE.md,
"Session 26: the post of a claimed QP"): the per-step table is grouped from it. gdb
steps one thread with the others stopped; the trace does not depend on the load.

    gdb -q -batch -ex "break *softrnic_rnic::qp::verbs::Qp::post_send" \\
        -ex "run write_lat --loopback -s 8 -n 4000 --quiet > /dev/null" \\
        -ex "ignore 1 2000" -x bench/post-trace.py target/release/softrnic 2>/dev/null \\
        | grep '^TR'

Each line: index, address, file:line, instruction.
"""
import gdb

gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("continue")
arch = gdb.selected_inferior().architecture()
gdb.execute("set scheduler-locking step")
lines = []
for n in range(2000):
    pc = int(gdb.parse_and_eval("$pc"))
    insn = arch.disassemble(pc)[0]["asm"].strip()
    sal = gdb.find_pc_line(pc)
    where = sal.symtab.filename.split("/")[-1] if sal.symtab else "?"
    lines.append("TR %4d %x %s:%s  %s" % (n, pc, where, sal.line, insn))
    if insn.startswith("syscall"):
        break
    gdb.execute("stepi", to_string=True)
gdb.execute("set scheduler-locking off")
print("\n".join(lines))
