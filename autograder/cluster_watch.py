"""Was the cluster whole for the whole grading?

A broker that dies or restarts while a notebook runs can make a correct cell fail (a client
that was talking to it, a topic made while its leader moved), and the score would then be the
cluster's fault. The watch notices that, however briefly it lasted, so that the grading is
reported as not done (an infrastructure error, exit code 2, no score) and graded again, never
scored. On the local cluster it watches the brokers' processes (a restart is a new process);
elsewhere it asks the controller which brokers are registered and not fenced.
"""

from __future__ import annotations

import threading

POLL_S = 0.5


class ClusterWatch:
    def __init__(self, admin: dict, expected_brokers: int = 3):
        self.admin_conf, self.expected = admin, expected_brokers
        self.problem = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nodes: dict = {}
        self._admin = None

    # --- what "whole" means ---------------------------------------------------------------
    def _local_nodes(self) -> dict:
        """node -> its Node, when the brokers are this machine's local cluster (pid files we can read)."""
        from cluster import Cluster, mode

        if mode() != "local":
            return {}
        nodes = Cluster().nodes
        return nodes if all(node.pid_file.exists() for node in nodes.values()) else {}

    @staticmethod
    def _identity(node) -> tuple | None:
        proc = node.process()
        try:
            return (proc.pid, proc.create_time()) if proc else None
        except Exception:
            return None

    def _look(self) -> str:
        if self._nodes:
            for n, (node, first) in self._nodes.items():
                if first is None:  # killed so recently that the controller still lists it
                    return f"broker {n} was down when the grading began"
                if self._identity(node) != first:
                    return f"broker {n} went down during the grading"
            return ""
        if self._admin is None:
            from cluster.clients import admin_client

            self._admin = admin_client("grader-watch", self.admin_conf, request_timeout_ms=5000)
        from cluster.brokers import live_brokers

        try:
            up = len(live_brokers(self._admin))
        except Exception as e:
            return f"the cluster stopped answering during the grading ({type(e).__name__})"
        return "" if up >= self.expected else f"only {up} of {self.expected} brokers were up during the grading"

    # --- the watch ------------------------------------------------------------------------
    def start(self) -> "ClusterWatch":
        self._nodes = {n: (node, self._identity(node)) for n, node in self._local_nodes().items()}
        self.problem = self._look() if self._nodes else ""
        self._thread = threading.Thread(target=self._run, name="cluster-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            found = self._look()
            if found:
                self.problem = found
                return

    def stop(self) -> str:
        """Stop watching; what went wrong, or ''."""
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        if not self.problem:
            self.problem = self._look()
        if self._admin is not None:
            self._admin.close()
        return self.problem
