"""Gradings share the machine's network: a port number alone proves nothing. A notebook that
names as its server_port a correct Counter server it did not start (another grading's, or one
outside the sandbox) gets no points for it: lab 1's checks call only a port that a process of
the grading's own kernel listens on."""

from __future__ import annotations

from concurrent import futures

import grpc
import nbformat

from autograder.pipeline import SOLUTIONS
from selfcheck.checks.lab1 import messages
from staff.corpus import Edit, Scenario

from .test_grade_cli import grade


def honest_server() -> tuple[grpc.Server, int, list[str]]:
    """A correct Counter service in this (the test's) process, outside any sandbox."""
    M, counts, calls = messages(), {}, []

    def increase(request, context):
        calls.append("Increase")
        counts[request.key] = counts.get(request.key, 0) + request.amount
        return M["IncreaseReply"](total=counts[request.key])

    def get(request, context):
        calls.append("Get")
        return M["GetReply"](total=counts.get(request.key, 0))

    handlers = {name: grpc.unary_unary_rpc_method_handler(fn, request_deserializer=M[req].FromString,
                                                          response_serializer=lambda m: m.SerializeToString())
                for name, fn, req in (("Increase", increase, "IncreaseRequest"), ("Get", get, "GetRequest"))}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("counter.Counter", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port, calls


def test_a_server_the_notebook_did_not_start_earns_nothing(cluster, tmp_path):
    server, port, calls = honest_server()
    try:
        nb = nbformat.read(SOLUTIONS / "lab1" / "lab1.ipynb", as_version=4)
        nb = Scenario("borrows-a-server", "lab1", "", (
            Edit("server_port = server.add_insecure_port", "after", f"server_port = {port}   # not ours"),)).build(nb)
        path = tmp_path / "lab1.ipynb"
        nbformat.write(nb, path)
        _, data = grade("lab1", path, tmp_path / "r.json")
    finally:
        server.stop(0)
    q3 = next(t for t in data["tests"] if t["name"] == "lab1-q3")
    assert q3["score"] == 0 and f"nothing your notebook started listens on port {port}" in q3["output"], q3
    # The notebook's own cells did use that server (its client cells call server_port), so
    # without the ownership check the grader's calls would have been answered correctly.
    assert calls, "the notebook never called the borrowed server: the test proves nothing"
