"""Kafka's own command-line tools, run from the pinned jars against this cluster as you: what an
operator types (`kafka-topics.sh`, `kafka-consumer-groups.sh`, `kafka-configs.sh`,
`kafka-share-groups.sh` and `kafka-console-share-consumer.sh` of a Kafka release; on a cluster of
one's own, an operator's `kafka-reassign-partitions.sh`, `kafka-leader-election.sh` and
`kafka-cluster.sh`), beside what the labs do with kafka-python's admin client.

    from cluster.tools import kafka_cli
    kafka_cli("topics", "--describe", "--topic", lab.topic("flights"))
    # $ kafka-topics.sh --describe --topic root.flights
    # Topic: root.flights  TopicId: ...  PartitionCount: 4  ReplicationFactor: 3  Configs: ...
    kafka_cli("reassign-partitions", "--execute", "--reassignment-json-file", "plan.json",
              "--throttle", "1000000", connection=own.connection)   # on your own cluster (lab 14)

Where the cluster is and who you are (`--bootstrap-server`, `--command-config`) are added for
you, as a Kafka release's users put them in a properties file; the command printed leaves them
out, so that it reads as the documentation writes it.
"""

from __future__ import annotations

import os
import re
import subprocess

from . import class_sharing, jars
from .accounts import Account
from .clients import account, bootstrap_servers
from .errors import ClusterError
from .java import java_executable
from .process import login_file

# tool -> (the jar bundle that has it, its main class). kafka-configs.sh is still Kafka's core
# (Scala) in 4.1 to 4.3; the others moved to the tools module.
TOOLS = {
    "topics": ("kafka-tools", "org.apache.kafka.tools.TopicCommand"),
    "consumer-groups": ("kafka-tools", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"),
    "share-groups": ("kafka-tools", "org.apache.kafka.tools.consumer.group.ShareGroupCommand"),
    "console-share-consumer": ("kafka-tools", "org.apache.kafka.tools.consumer.ConsoleShareConsumer"),
    "configs": ("kafka", "kafka.admin.ConfigCommand"),
    # an operator's (lab 14, on a cluster of one's own): move replicas (with a throttle), elect
    # leaders, unregister a broker that left for good
    "reassign-partitions": ("kafka-tools", "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"),
    "leader-election": ("kafka-tools", "org.apache.kafka.tools.LeaderElectionCommand"),
    "cluster": ("kafka-tools", "org.apache.kafka.tools.ClusterTool"),
}
# Tools whose options belong to a subcommand (`kafka-cluster.sh unregister --id 4`): where the
# cluster and the login go is after it, and the login file's option is named otherwise.
AFTER_SUBCOMMAND = {"cluster": "--config"}
TIMEOUT_S = 60
STACK_FRAME = re.compile(r"\s+(at |\.\.\. \d+ more)")


def kafka_cli(
    tool: str, *args: str, timeout: float = TIMEOUT_S, echo: bool = True, connection: dict | None = None
) -> str:
    """Run `kafka-<tool>.sh ARGS` (tool: one of TOOLS) as your login on this cluster; print the
    command and what it printed (echo=False: print nothing), and return its output.
    connection: kafka-python settings of another cluster or login to run it with instead: your
    own cluster's (connection=own.connection), the grader's."""
    if tool not in TOOLS:
        raise ValueError(f"no tool {tool!r}; the kit runs {', '.join(TOOLS)}")
    bundle, main_class = TOOLS[tool]
    classpath = jars.kafka_classpath() if bundle == "kafka" else jars.jars(bundle)
    java = java_executable()
    sharing, partial = class_sharing.tool_options(java, classpath)
    if connection is None:
        servers, user = bootstrap_servers(), account()
    else:  # not the course cluster's login: that one may not even exist (only an own cluster runs)
        servers = connection["bootstrap_servers"]
        servers = servers if isinstance(servers, str) else ",".join(servers)
        user = Account(
            connection["sasl_plain_username"], connection["sasl_plain_password"], connection["sasl_mechanism"]
        )
    with login_file(user.java()) as login:
        where = ["--bootstrap-server", servers, AFTER_SUBCOMMAND.get(tool, "--command-config"), login]
        args_with_login = [*args[:1], *where, *args[1:]] if tool in AFTER_SUBCOMMAND else [*where, *args]
        cmd = [
            java,
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.apache.logging.log4j.level=WARN",
            *sharing,
            "-cp",
            os.pathsep.join(map(str, classpath)),
            main_class,
            *map(str, args_with_login),
        ]
        ran = False
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            ran = out.returncode == 0
            if partial is not None and out.returncode != 0:  # maybe the archive's fault: once more without
                class_sharing.keep_tool_archive(java, classpath, partial, ran=False)
                partial = None
                out = subprocess.run(
                    [a for a in cmd if a not in sharing], capture_output=True, text=True, timeout=timeout
                )
        except subprocess.TimeoutExpired:
            raise ClusterError(
                f"kafka-{tool}.sh did not finish within {timeout:.0f} s.",
                hint="Is every broker up (`python -m cluster status`)?",
            ) from None
        finally:
            class_sharing.keep_tool_archive(java, classpath, partial, ran)
    text = out.stdout.rstrip()
    if out.returncode != 0:
        # what it said, without a Java stack trace's frames ("\tat ...", "... 5 more"): the error is above them
        said = [
            line
            for line in (out.stderr or out.stdout).strip().splitlines()
            if line.strip() and not STACK_FRAME.match(line)
        ]
        raise ClusterError(
            f"kafka-{tool}.sh {' '.join(args)} failed (exit code {out.returncode}): " + " | ".join(said[-4:]),
            hint=f"`kafka_cli('{tool}', '--help')` lists what it takes; names are full ones "
            "(lab.topic(...), lab.group(...)).",
        )
    if echo:
        print(f"$ kafka-{tool}.sh {' '.join(args)}\n{text}")
    return text
