"""Runs outside the sandbox, with the grader's rights, just before bwrap (python -I -S -c <this
file's text> GROUP_DIR ... -- bwrap args...): join the sandbox's control groups, so that bwrap
and everything it starts are counted there, then become bwrap."""

import os
import sys

args = sys.argv[1:]
end = args.index("--")
for group in args[:end]:
    with open(os.path.join(group, "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
os.execvp(args[end + 1], args[end + 1 :])
