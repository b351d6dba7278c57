"""Traces a message's read natively, instruction by instruction: from the return of the
`recvfrom` that brought it (glibc's `syscall()` asked for 32768 octets and got some) to
the entry of the receive path's feed (a function named `softrnic_rnic::receive::feed*`),
on the thread that read it (docs/ARCHITECTURE.md, "Session 29: the read to the receive
path, and the empty poll"). gdb steps that thread with the others stopped, so the count
does not depend on the load.

    ARGS="write_lat --loopback -s 8 -n 4000 --quiet" \\
        gdb -q -batch -x bench/read-trace.py target/release/softrnic 2>/dev/null | grep '^TR'

SKIP (default 2000) data reads are let through first. Each line: index, file:line,
function, instruction; the last says how many and on which thread.
"""
import gdb, os

skip = int(os.environ.get("SKIP", "2000"))
args = os.environ.get("ARGS", "write_lat --loopback -s 8 -n 4000 --quiet")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("break main")
gdb.execute("run %s > /dev/null" % args)
gdb.execute("delete")
# The instruction after glibc's `syscall` in `syscall()`.
start = gdb.execute("info line syscall", to_string=True).split("starts at address ")[1].split()[0]
asm = [l for l in gdb.execute("x/16i %s" % start, to_string=True).splitlines()]
after = None
for i, l in enumerate(asm):
    if l.rstrip().endswith("syscall"):
        after = asm[i + 1].split()[0].lstrip("=>").strip() or asm[i + 1].split()[1]
        break
bp = gdb.Breakpoint("*" + after)
bp.condition = "$rax > 0 && $rdx == 32768"
gdb.execute("ignore %d %d" % (bp.number, skip))
gdb.execute("continue")
gdb.execute("set scheduler-locking step")
arch = gdb.selected_inferior().architecture()
thread = gdb.selected_thread().name
for n in range(2000):
    pc = int(gdb.parse_and_eval("$pc"))
    insn = arch.disassemble(pc)[0]["asm"].strip()
    sal = gdb.find_pc_line(pc)
    where = sal.symtab.filename.split("/")[-1] if sal.symtab else "?"
    b = gdb.block_for_pc(pc)
    fn = str(b.function) if b is not None and b.function is not None else "?"
    if fn.startswith("softrnic_rnic::receive::feed"):
        print("TR %d instructions from the recvfrom's return to %s (thread %s)" % (n, fn, thread))
        break
    print("TR %4d %s:%s %s  %s" % (n, where, sal.line, fn, insn))
    gdb.execute("stepi", to_string=True)
gdb.execute("set scheduler-locking off")
gdb.execute("kill")
