"""Installed in a grading kernel before the notebook runs: keeps a careless submission's
admin calls inside its own namespace (a clean-up loop that deletes every topic), with a
message that says why.

This is accident protection, not a boundary: code can go around an in-process hook (other
calls, other clients, child processes). What student code can do is bounded by the sandbox
(autograder/sandbox.py) and, on the cluster, by the brokers.
"""

from __future__ import annotations

MAX_PARTITIONS = 64        # per topic; lab topics need a handful


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


def install(namespace: str) -> None:
    _install_kafka_guard(namespace)
