"""python -m cluster up | down | status | logs | stop-broker N | start-broker N | kill-broker N | jars"""

from __future__ import annotations

import argparse
import sys

from . import jars, settings
from .errors import ClusterError
from .kafka import STATUS_HEADER, Cluster


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join(fmt.format(*r) for r in [header, *rows])


def cmd_up(c: Cluster, a) -> None:
    already = c.is_running()
    servers = c.up()
    print(("The cluster was already running and works." if already else "The cluster is ready."))
    print(f"Bootstrap servers: {servers}")


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
        sys.exit(3)  # like `systemctl status`: not running


def cmd_logs(c: Cluster, a) -> None:
    for n in ([a.node] if a.node else list(c.nodes)):
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
            raise ClusterError(f"{jars.LOCK_FILE.name} is stale.",
                               hint="Run `python -m cluster jars --update` and commit the lock file.")
    else:
        print(f"All jars match {jars.LOCK_FILE.name}.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m cluster", description="The course's local three-broker Kafka cluster.")
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
    for name, func, text in (("stop-broker", cmd_stop, "stop one broker cleanly"),
                             ("kill-broker", cmd_kill, "kill one broker (SIGKILL)"),
                             ("start-broker", cmd_start, "start one broker again, with its data")):
        s = sub.add_parser(name, help=text)
        s.add_argument("node", type=int, choices=settings.NODE_IDS)
        s.set_defaults(func=func)
    j = sub.add_parser("jars", help="fetch the pinned jars (once) and compare them with the lock file")
    j.add_argument("--check", action="store_true", help="fail if the lock file is stale")
    j.add_argument("--update", action="store_true", help="rewrite the lock file")
    j.set_defaults(func=cmd_jars)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
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
