"""The user method's outer process (python -I -S -c <this file's text> program args...): it
stays root, so the student's code cannot signal it. A subreaper, so every orphan of the sandbox
becomes its child and stays in the sandbox's tree; it dies with the grader; it starts the
program, and when the program ends, kills whatever the program left behind and exits as bwrap
does (128 + signal for a killed program)."""

import ctypes
import os
import signal
import sys

libc = ctypes.CDLL(None)
libc.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: the sandbox's orphans become our children
libc.prctl(1, 9)  # PR_SET_PDEATHSIG: SIGKILL when the grader dies
me = str(os.getpid())


def children():
    found = []
    for d in os.listdir("/proc"):
        try:
            if d.isdigit() and open("/proc/" + d + "/stat").read().rsplit(")", 1)[1].split()[1] == me:
                found.append(int(d))
        except (OSError, IndexError):
            pass
    return found


program = os.fork()
if program == 0:
    os.execvp(sys.argv[1], sys.argv[1:])
for n in (signal.SIGINT, signal.SIGTERM):
    signal.signal(n, lambda n, f: os.kill(program, n))
code = 137
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == program:
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
        break
while True:  # the program has ended: so does everything it left behind
    for pid in children():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.wait()
    except ChildProcessError:
        break
sys.exit(code)
