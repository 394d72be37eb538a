"""A relay between the grader's kernel client and the student's kernel, in a process of its own.

ZeroMQ hands over a message only once all its parts have arrived, and its size cap
(ZMQ_MAXMSGSIZE) is per part: a kernel that sends one message of fifty 15 MB parts makes
whoever receives it hold 750 MB before any code can look at it (a reviewer took the grader to
2.3 GB so). So the grader's client does not talk to the kernel: it talks to this relay, which
runs with a memory limit of its own (RLIMIT_AS), receives each message from the kernel, drops
any whose parts add up to more than MAX_MESSAGE_BYTES, and passes the rest on. A message too
large even for the relay's memory ends the relay, not the grader; the grading then sees a dead
kernel.

    python -m autograder.kernel_relay KERNEL_IP RELAY_IP SHELL IOPUB STDIN CONTROL HB MAX_BYTES MEMORY_MB

Both sides use ZeroMQ's ipc transport: the kernel's sockets are KERNEL_IP-<port> (in the
grading's working folder), the relay's RELAY_IP-<port> (in a folder of the grader's own).
"""

from __future__ import annotations

import os
import resource
import sys
import time

CHANNELS = ("shell", "iopub", "stdin", "control", "hb")
MAX_PART_BYTES = 16 * 2**20  # as the client's own cap (kernel.MAX_MESSAGE_BYTES)


def endpoint(ip: str, port: int) -> str:
    return f"ipc://{ip}-{port}"


def main(argv: list[str]) -> int:
    import zmq

    kernel_ip, relay_ip, *rest = argv
    ports = dict(zip(CHANNELS, map(int, rest[:5])))
    max_bytes, memory_mb = int(rest[5]), int(rest[6])
    limit = memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    parent = os.getppid()

    ctx = zmq.Context()
    ctx.setsockopt(zmq.MAXMSGSIZE, MAX_PART_BYTES)
    fronts, backs = {}, {}
    for name, port in ports.items():
        if name == "iopub":  # the kernel publishes; the client subscribes to the relay
            front, back = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
            back.setsockopt(zmq.SUBSCRIBE, b"")
        else:  # requests from the client, replies (and stdin's requests) from the kernel
            front, back = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
        for s in (front, back):
            s.setsockopt(zmq.LINGER, 0)
        front.bind(endpoint(relay_ip, port))
        back.connect(endpoint(kernel_ip, port))
        fronts[name], backs[name] = front, back
    client_id: dict[str, bytes] = {}
    poller = zmq.Poller()
    for s in (*fronts.values(), *backs.values()):
        poller.register(s, zmq.POLLIN)
    by_socket = {s: ("front", n) for n, s in fronts.items()} | {s: ("back", n) for n, s in backs.items()}
    dropped, checked = 0, time.monotonic()
    while True:
        for sock, _ in poller.poll(500):
            side, name = by_socket[sock]
            parts = sock.recv_multipart(copy=False)
            if side == "front":  # the grader's own requests go through as they are
                if name != "iopub":
                    client_id[name] = parts[0].bytes
                    backs[name].send_multipart(parts[1:], copy=False)
                continue
            if sum(len(p.buffer) for p in parts) > max_bytes:
                dropped += 1
                print(
                    f"dropped a {name} message of {sum(len(p.buffer) for p in parts):,} bytes",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            if name == "iopub":
                fronts[name].send_multipart(parts, copy=False)
            elif name in client_id:
                fronts[name].send_multipart([client_id[name], *parts], copy=False)
        if time.monotonic() - checked > 1:
            checked = time.monotonic()
            if os.getppid() != parent:  # the grader is gone
                return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
