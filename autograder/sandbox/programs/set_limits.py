"""Runs inside the sandbox before the student's program (python -I -S -c <this file's text>
NAME=VALUE ... -- program args...): set each resource limit, soft = hard so that it cannot be
raised again, then become the program."""

import os
import resource
import sys

args = sys.argv[1:]
end = args.index("--")
for setting in args[:end]:
    name, value = setting.split("=")
    resource.setrlimit(getattr(resource, name), (int(value), int(value)))
os.execvp(args[end + 1], args[end + 1 :])
