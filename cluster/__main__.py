"""python -m cluster up | down | status | logs | stop-broker N | start-broker N | kill-broker N | jars
| users | add-user NAME | remove-user NAME | clean | capacity N
| k8s OUT --roster FILE"""

from __future__ import annotations

import argparse
import sys

from . import accounts, cli, jars, settings
from .errors import ClusterError
from .brokers import STATUS_HEADER, Cluster


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [header, *rows])


def cmd_up(c: Cluster, a) -> None:
    already = c.is_running()
    servers = c.up()
    print("The cluster was already running and works." if already else "The cluster is ready.")
    print(f"Bootstrap servers: {servers}")
    from .postgres import missing

    if why := missing():  # only the change-data-capture lab needs it: say so, never fail
        print(f"Note: {why}")


def cmd_down(c: Cluster, a) -> None:
    killed = c.down(wipe=a.wipe)
    if killed:
        print(f"Nodes {killed} did not stop within {settings.STOP_TIMEOUT_S} s and were killed.")
    print("Stopped; data " + ("deleted." if a.wipe else f"kept in {c.cfg.home} (`down --wipe` deletes it)."))


def cmd_status(c: Cluster, a) -> None:
    rows = c.status()
    print(table(STATUS_HEADER, [r.row() for r in rows]))
    print(f"Bootstrap servers: {c.bootstrap_servers}   folder: {c.cfg.home}")
    dead = [r.id for r in rows if r.state == "dead"]
    if dead:
        print(f"Dead (killed or crashed): {dead}. `python -m cluster start-broker N` brings one back with its data.")
    if all(r.state != "alive" for r in rows):
        print("The cluster is not running: `make up` (or `python -m cluster up`) starts it.")
        sys.exit(3)  # like `systemctl status`, for scripts: not running (`make status` takes it as an answer)


def cmd_logs(c: Cluster, a) -> None:
    for n in [a.node] if a.node else list(c.nodes):
        node = c.nodes[n]
        print(f"===== node {n}: {node.log_file} =====")
        print(node.log_tail(a.lines))


def cmd_stop(c: Cluster, a) -> None:
    clean = c.stop_broker(a.node)
    print(f"Broker {a.node} stopped" + ("." if clean else " (it did not stop in time and was killed)."))


def cmd_kill(c: Cluster, a) -> None:
    c.kill_broker(a.node)
    print(f"Broker {a.node} killed (SIGKILL).")


def cmd_start(c: Cluster, a) -> None:
    c.start_broker(a.node)
    print(f"Broker {a.node} is running and back in the cluster.")


def cmd_jars(c: Cluster, a) -> None:
    if a.update:
        jars.write_lock()
        print(f"Wrote {jars.LOCK_FILE}")
        return
    for name in settings.pins()["maven"]:
        print(f"{name}: {len(jars.jars(name))} jars")
    diff = jars.lock_differences()
    if diff:
        print("\n".join(diff))
        if a.check:
            raise ClusterError(
                f"{jars.LOCK_FILE.name} is stale.",
                hint="Run `python -m cluster jars --update` and commit the lock file.",
            )
    else:
        print(f"All jars match {jars.LOCK_FILE.name}.")
    # Spark's drivers start from a class archive of this machine (cluster/class_sharing.py): made
    # once here, by a driver of the kit's own (a minute); without it they start as before.
    from .class_sharing import make_spark_archive
    from .java import java_executable

    try:
        made, why = make_spark_archive(java_executable())
    except ClusterError as e:  # no Java: the jars are fetched all the same
        made, why = None, e.message
    print(
        f"Spark's class archive: {made}"
        if made
        else f"Spark's class archive not made ({why}); drivers start without it."
    )


def _admin():
    """The course's admin on the cluster the environment names (the local one by default;
    KAFKA_ADMIN_PASSWORD and KAFKA_ADMIN_BOOTSTRAP_SERVERS for a hosted or compose one)."""
    from .clients import admin_client

    try:
        return admin_client("course-cli", request_timeout_ms=15_000)
    except ValueError as e:
        raise ClusterError(str(e)) from None


def cmd_users(c: Cluster, a) -> None:
    with _admin() as admin:
        names = accounts.users(admin)
    print("\n".join(names) if names else "No users yet (`python -m cluster add-user NAME` makes one).")


def cmd_add_user(c: Cluster, a) -> None:
    """A user whose namespace is its name, with the course's ACLs and quotas. The password is
    KAFKA_PASSWORD if set (compose's set-up), else a new one, printed once for the hub."""
    ns = a.name
    given = settings.env("KAFKA_PASSWORD")
    account = accounts.Account(ns, given or accounts.new_password())
    with _admin() as admin:
        accounts.setup_cluster(admin)
        accounts.grant(admin, account, ns)
    print(f"User {ns!r} may use the topics, groups and transactional ids named '{ns}.*'.")
    if not given:
        print(f"KAFKA_USERNAME={ns}\nKAFKA_PASSWORD={account.password}")


def cmd_remove_user(c: Cluster, a) -> None:
    with _admin() as admin:
        accounts.revoke(admin, a.name)
    print(f"User {a.name!r} and its ACLs are gone (its topics stay until deleted).")


def cmd_clean(c: Cluster, a) -> None:
    """Your namespace's topics and consumer groups, deleted as you (your login; on a hub too):
    what a class leaves on a shared cluster is what its students have not freed."""
    from .clients import bootstrap_servers, connection, namespace
    from .lab import Lab

    lab = Lab("clean", bootstrap_servers(), namespace(), connection())
    # groups first: Kafka 4.3 never answers the deletion of a share group whose topic is gone
    groups = lab.delete_my_groups()
    topics = lab.delete_my_topics()
    print(
        f"Namespace '{lab.namespace}': deleted {len(topics)} topic(s) and {len(groups)} consumer group(s)."
        + ("" if topics or groups else " It held nothing.")
    )
    for name in topics + groups:
        print(f"  {name}")


def cmd_capacity(c: Cluster, a) -> None:
    from . import capacity

    plan = capacity.plan(a.students)
    print(
        plan.summary()
        + "."
        + (
            f"\nEach broker's heap: {plan.heap_mb} MB (COURSE_BROKER_HEAP={plan.heap_mb}m)."
            if plan.fits
            else f"\n{plan.advice()}"
        )
    )


def cmd_k8s(c: Cluster, a) -> None:
    from pathlib import Path

    from . import k8s

    roster = k8s.read_roster(Path(a.roster))
    for path in k8s.write(Path(a.out), roster, a.namespace, a.image):
        print(path)
    print(
        f"{len(roster)} students; apply with kubectl apply -n {a.namespace} -f strimzi-kafka.yaml -f kafka-users.yaml, "
        "then helm upgrade --install with z2jh-values.yaml (docs/scaling.md)."
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cluster", description="The course's local three-broker Kafka cluster.")
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="log each step (nodes started, waits, users) with its time; -vv: everything",
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start the cluster; returns when it works").set_defaults(func=cmd_up)
    d = sub.add_parser("down", help="stop the cluster (keeps its data)")
    d.add_argument("--wipe", action="store_true", help="also delete all topics and data")
    d.set_defaults(func=cmd_down)
    sub.add_parser("status", help="each node: state, pid, ports, controller, leaders").set_defaults(func=cmd_status)
    lg = sub.add_parser("logs", help="the last lines of the nodes' logs")
    lg.add_argument("node", type=int, nargs="?", choices=settings.NODE_IDS, help="one node (default: all)")
    lg.add_argument("-n", "--lines", type=int, default=40, help="how many lines per node (default 40)")
    lg.set_defaults(func=cmd_logs)
    for name, func, text in (
        ("stop-broker", cmd_stop, "stop one broker cleanly"),
        ("kill-broker", cmd_kill, "kill one broker (SIGKILL)"),
        ("start-broker", cmd_start, "start one broker again, with its data"),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("node", type=int, choices=settings.NODE_IDS)
        s.set_defaults(func=func)
    j = sub.add_parser("jars", help="fetch the pinned jars (once) and compare them with the lock file")
    j.add_argument("--check", action="store_true", help="fail if the lock file is stale")
    j.add_argument("--update", action="store_true", help="rewrite the lock file")
    j.set_defaults(func=cmd_jars)
    sub.add_parser("users", help="the cluster's student users").set_defaults(func=cmd_users)
    u = sub.add_parser("add-user", help="a student user with the rights of its namespace NAME.*")
    u.add_argument("name", type=_user_name)
    u.set_defaults(func=cmd_add_user)
    r = sub.add_parser("remove-user", help="delete a user's login and ACLs")
    r.add_argument("name", type=_user_name)
    r.set_defaults(func=cmd_remove_user)
    sub.add_parser(
        "clean",
        help="delete your namespace's topics and consumer groups (a lab's first cell deletes "
        "the topics of the lab before; this frees them now)",
    ).set_defaults(func=cmd_clean)
    cap = sub.add_parser(
        "capacity",
        help="what a class of N students needs of a shared cluster (heap), or why one cluster cannot hold it",
    )
    cap.add_argument("students", type=int)
    cap.set_defaults(func=cmd_capacity)
    k = sub.add_parser(
        "k8s",
        help="the course on Kubernetes: Strimzi's Kafka, a KafkaUser per student, Zero to "
        "JupyterHub values (written from the kit's settings)",
    )
    k.add_argument("out", help="the folder to write the three YAML files into")
    k.add_argument("--roster", required=True, help="a file with one student login name per line")
    k.add_argument(
        "--namespace",
        default="jhub",
        help="the Kubernetes namespace of the hub, its users' servers and the Kafka cluster (default: %(default)s)",
    )
    k.add_argument(
        "--image",
        default="kafka-course/jupyter:latest",
        help="the course's notebook image, built "
        "from cluster/Dockerfile and pushed where the cluster can pull it (default: %(default)s)",
    )
    k.set_defaults(func=cmd_k8s)
    return p


def _user_name(text: str) -> str:
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,99}", text) or text in accounts.SUPER_USERS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a user name is lower-case letters, digits and '-' "
            f"(it is also the namespace), and not {' or '.join(accounts.SUPER_USERS)}"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cli.configure(args.verbose)
    try:
        args.func(Cluster(), args)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
