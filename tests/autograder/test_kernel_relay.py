"""The relay between the grader and the student's kernel (autograder/kernel_relay.py): a real
kernel in a real sandbox sends one message of thirty 15 MB parts, each under ZeroMQ's per-part
cap; the grader's process must not hold it (ZeroMQ hands over only whole messages), and the
kernel stays usable: values are read through the relay as before."""

from __future__ import annotations

import resource
import sys
import tempfile
from pathlib import Path

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.kernel import KernelSession
from autograder.sandbox import Sandbox, available

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")

FLOOD = (
    "k = get_ipython().kernel\n"
    "k.session.send(k.iopub_socket, 'display_data', content={'data': {'text/plain': 'x'}, 'metadata': {}},\n"
    "               parent=k.get_parent('shell'), buffers=[bytes(15 * 2**20)] * 30)\n"
)


def test_a_many_part_message_never_reaches_the_grader():
    work = Path(tempfile.mkdtemp(prefix="relay-test-"))
    for sub in (".home", ".tmp"):
        (work / sub).mkdir()
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(work / ".home"),
        "TMPDIR": str(work / ".tmp"),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    nb = new_notebook(cells=[new_code_cell(FLOOD), new_code_cell("x = 42\nbig = 'y' * 3_000_000")])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with KernelSession(nb, Sandbox(work), env, cell_timeout=60, total_timeout=120) as session:
        session.run(lambda i, label: None, lambda cell: None)
        assert session.value("x") == 42  # the kernel answers through the relay
        assert len(session.value("big")) == 3_000_000  # a large value of a few MB goes through
        relay = session.client.km.relay
        assert relay is not None and relay.poll() is None
    grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grew < 200 * 2**20, f"the grader grew by {grew / 2**20:.0f} MB"
    assert relay.poll() is not None  # stopped with the session
