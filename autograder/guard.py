"""Installed in a grading kernel before the notebook runs: keeps a submission's mistakes
inside its own folder and its own namespace, so other gradings on the cluster are safe.

- Files: an audit hook (which Python does not let code remove) refuses writes, deletes and
  renames outside the working folder.
- Kafka: the admin client refuses to create, delete or grow topics, or delete groups,
  outside the grading namespace, and refuses absurd partition counts.

These stop accidents and careless code (a loop that deletes every topic). They are not a
security boundary against deliberate attacks; the grader's verdicts never depend on them.
"""

from __future__ import annotations

import os
import sys

MAX_PARTITIONS = 64        # per topic; lab topics need a handful
ALLOWED_PREFIXES = ("/dev/", "/proc/self/")

_WRITE_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.truncate", "os.chmod",
                 "os.chown", "os.symlink", "os.link", "shutil.rmtree", "shutil.copyfile", "os.utime"}


def _install_file_guard(root: str) -> None:
    root = os.path.realpath(root) + os.sep

    def inside(path) -> bool:
        if isinstance(path, int):  # a file descriptor: already opened, already checked
            return True
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        full = os.path.realpath(os.path.abspath(os.fspath(path)))
        return (full + os.sep).startswith(root) or full.startswith(ALLOWED_PREFIXES)

    def refuse(path):
        raise PermissionError(f"The grader lets a notebook write only inside its own folder ({root}); "
                              f"this notebook tried to change {path!r}. Use a relative path.")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                      (flags is not None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
            if writing and path is not None and not inside(path):
                refuse(path)
        elif event in _WRITE_EVENTS:
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and not inside(arg):
                    refuse(arg)

    sys.addaudithook(hook)


def _install_kafka_guard(namespace: str) -> None:
    from kafka.admin import KafkaAdminClient

    prefix = namespace + "."

    def outside(names):
        return [n for n in names if not str(n).startswith(prefix)]

    def refuse(action, names):
        raise PermissionError(f"The grader refused to {action} {sorted(map(str, names))[:5]}"
                              f"{' ...' if len(names) > 5 else ''}: a notebook may only touch its own "
                              f"topics and groups, whose names start with {prefix!r} (use lab.topic(...)).")

    original = {name: getattr(KafkaAdminClient, name) for name in
                ("create_topics", "delete_topics", "create_partitions", "delete_groups")}

    def create_topics(self, new_topics, *args, **kwargs):
        names = [t.name for t in new_topics]
        if outside(names):
            refuse("create topics", outside(names))
        big = [f"{t.name} ({t.num_partitions})" for t in new_topics if (t.num_partitions or 0) > MAX_PARTITIONS]
        if big:
            raise ValueError(f"The grader refuses topics with more than {MAX_PARTITIONS} partitions: {big}. "
                             "Each partition costs the brokers memory and files; labs need a handful.")
        return original["create_topics"](self, new_topics, *args, **kwargs)

    def delete_topics(self, topics, *args, **kwargs):
        if outside(topics):
            refuse("delete topics", outside(topics))
        return original["delete_topics"](self, topics, *args, **kwargs)

    def create_partitions(self, topic_partitions, *args, **kwargs):
        if outside(topic_partitions):
            refuse("add partitions to", outside(topic_partitions))
        big = [t for t, p in topic_partitions.items() if getattr(p, "total_count", 0) > MAX_PARTITIONS]
        if big:
            raise ValueError(f"The grader refuses more than {MAX_PARTITIONS} partitions per topic: {big}")
        return original["create_partitions"](self, topic_partitions, *args, **kwargs)

    def delete_groups(self, group_ids, *args, **kwargs):
        if outside(group_ids):
            refuse("delete consumer groups", outside(group_ids))
        return original["delete_groups"](self, group_ids, *args, **kwargs)

    for fn in (create_topics, delete_topics, create_partitions, delete_groups):
        setattr(KafkaAdminClient, fn.__name__, fn)


def install(root: str, namespace: str) -> None:
    _install_kafka_guard(namespace)
    _install_file_guard(root)
