"""The kernels of the hub's users listen on ipc sockets in a runtime folder of the user's alone,
never on TCP ports (issue 41, item 10: a process of another user found a kernel's ports in
/proc/net/tcp, subscribed to its IOPub and read every cell's code and output).

No hub runs: each kernel starts as in a user's server, from the config folder that
`python -m hub prepare` writes and the environment the hub gives the server, loaded by
jupyter_server's own app and kernel manager (no HTTP server); Validate's kernel as nbgrader's
Validate button starts it. Run as root, a process of another user (nobody) tries the files too."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import stat
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest

from hub import course_hub
from hub.course_hub import INSTRUCTOR, STUDENT, HubError

ME = pwd.getpwuid(os.geteuid()).pw_name
AS_ROOT = os.geteuid() == 0
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")

# ipykernel's IOPub pipe: a PULL socket on 127.0.0.1 by which the kernel's forked child processes
# send their output to IOPub (ipykernel binds it to TCP whatever the transport). A peer can only
# push to it, nothing is sent back, and a message without the kernel's random 16-byte key is
# dropped: nothing of the kernel's can be read there. It is the one TCP listener allowed.
PIPE_PORT = "print(get_ipython().kernel.iopub_thread._pipe_port)"


@pytest.fixture
def hub(monkeypatch):
    """A prepared hub's config folders and runtime folders, in a state folder as short as the
    default one (pytest's tmp_path is too long a path for a socket), served to the user running
    the tests."""
    with tempfile.TemporaryDirectory(prefix="hub-") as state:
        monkeypatch.setenv("COURSE_HUB_STATE", state)
        monkeypatch.setenv("COURSE_HUB_EXCHANGE", f"{state}/exchange")
        configs = course_hub.write_jupyter_configs(subdomains=False)
        course_hub.make_runtime_root()
        yield configs


def as_the_hub_starts(monkeypatch, configs: dict[str, Path], role: str) -> Path:
    """The Jupyter part of the environment the hub gives the server of ME in `role`, and the
    runtime folder it makes at the start."""
    folder = course_hub.make_runtime_dir(ME)
    env = course_hub.jupyter_environment(ME, role, configs)
    assert env["JUPYTER_RUNTIME_DIR"] == str(folder)
    for name in ("JUPYTER_CONFIG_PATH", "JUPYTER_RUNTIME_DIR"):
        monkeypatch.setenv(name, env[name])
    return folder


@contextlib.asynccontextmanager
async def a_servers_kernel():
    """A kernel started by jupyter_server's kernel manager, configured as a server is at its
    start with the environment of this process; a client of its."""
    from jupyter_server.serverapp import ServerApp

    app = ServerApp()
    app.load_config_file()  # jupyter_config and jupyter_server_config, from JUPYTER_CONFIG_PATH on
    app.init_event_logger()
    app.init_configurables()  # the server's kernel manager, on its runtime folder
    kernels = app.kernel_manager
    kernel_id = await kernels.start_kernel(kernel_name="python3")
    km = kernels.get_kernel(kernel_id)
    client = km.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=60)
        yield km, client
    finally:
        client.stop_channels()
        await kernels.shutdown_kernel(kernel_id, now=True)


async def printed(client, code: str) -> str:
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])

    reply = await client.execute_interactive(code, timeout=30, output_hook=hook)
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def tcp_listeners(pid: int) -> set[int]:
    """The TCP ports (v4 and v6: /proc/net/tcp, tcp6) on which process `pid` listens."""
    return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def sockets_of(info: dict) -> list[Path]:
    return [Path(f"{info['ip']}-{info[port]}") for port in PORTS]


def tried_by_another_user(paths: list[Path], tcp_port: int | None = None) -> dict[str, str]:
    """What a process of the user nobody gets opening each path (connecting, for a socket), and
    connecting to 127.0.0.1:tcp_port: "ok" or the error's name."""
    script = """
import json, socket, stat, sys
found = {}
for path in json.loads(sys.argv[1]):
    try:
        if stat.S_ISSOCK(__import__("os").stat(path).st_mode):
            socket.socket(socket.AF_UNIX).connect(path)
        else:
            open(path).close()
        found[path] = "ok"
    except OSError as e:
        found[path] = type(e).__name__
if sys.argv[2] != "-":
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=5).close()
        found["tcp"] = "ok"
    except OSError as e:
        found["tcp"] = type(e).__name__
print(json.dumps(found))
"""
    nobody = pwd.getpwnam("nobody")
    done = subprocess.run(
        ["/usr/bin/python3", "-c", script, json.dumps([str(p) for p in paths]), str(tcp_port or "-")],
        user=nobody.pw_uid,
        group=nobody.pw_gid,
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(done.stdout)


def test_a_users_kernel_listens_on_ipc_in_their_own_folder_and_on_no_tcp_port(hub, monkeypatch):
    async def run():
        for role in (STUDENT, INSTRUCTOR):
            folder = as_the_hub_starts(monkeypatch, hub, role)
            async with a_servers_kernel() as (km, client):
                pid = km.provisioner.pid
                pipe = int(await printed(client, PIPE_PORT))
                info = km.get_connection_info()
                assert info["transport"] == "ipc"
                assert tcp_listeners(pid) == {pipe}  # none of its channels
                # its connection file and sockets in the runtime folder, which is ME's alone
                assert Path(km.connection_file).parent == folder
                assert folder.stat().st_uid == os.geteuid() and folder.stat().st_mode & 0o777 == 0o700  # (+ sticky)
                connection = Path(km.connection_file).stat()
                assert connection.st_uid == os.geteuid() and connection.st_mode & 0o077 == 0
                sockets = sockets_of(info)
                assert all(p.parent == folder and stat.S_ISSOCK(p.stat().st_mode) for p in sockets)
                unix = {c.laddr for c in psutil.Process(pid).net_connections(kind="unix")}
                assert {str(p) for p in sockets} <= unix  # the kernel's own listening sockets
                assert "4" in await printed(client, "print(2 + 2)")  # and it works on them
                if AS_ROOT:
                    tried = tried_by_another_user([Path(km.connection_file), *sockets])
                    assert set(tried.values()) == {"PermissionError"}, tried
            assert not list(folder.iterdir())  # a kernel shut down leaves nothing behind

    asyncio.run(run())


def test_with_jupyter_clients_defaults_the_same_checks_find_the_kernels_tcp_ports(monkeypatch, tmp_path):
    """What the hub's servers did before: the checks above see the leak."""
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))

    async def run():
        async with a_servers_kernel() as (km, client):
            pipe = int(await printed(client, PIPE_PORT))
            info = km.get_connection_info()
            assert info["transport"] == "tcp"
            assert tcp_listeners(km.provisioner.pid) == {pipe, *(info[port] for port in PORTS)}
            if AS_ROOT:  # any user may connect to its IOPub
                assert tried_by_another_user([], info["iopub_port"]) == {"tcp": "ok"}

    asyncio.run(run())


def test_validates_kernel_listens_on_ipc_in_the_users_folder(hub, monkeypatch, tmp_path):
    """nbgrader's Validate runs the notebook in a kernel of its own, with nbgrader's config as its
    handler loads it (the server's cwd first: the user's home, here an empty folder)."""
    import nbformat
    from nbgrader.server_extensions.validate_assignment.handlers import ValidateAssignmentHandler
    from nbgrader.validator import Validator

    folder = as_the_hub_starts(monkeypatch, hub, STUDENT)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    report = home / "report.json"
    code = f"""
import json, os, stat, psutil
from ipykernel.connect import get_connection_file, get_connection_info
pipe = get_ipython().kernel.iopub_thread._pipe_port
json.dump({{
    "info": json.loads(get_connection_info()),
    "file": get_connection_file(),
    "file_mode": os.stat(get_connection_file()).st_mode,
    "tcp": [c.laddr.port for c in psutil.Process().net_connections("inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port != pipe],
}}, open({str(report)!r}, "w"))
"""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, home / "lab.ipynb")

    config = ValidateAssignmentHandler.load_config(None)  # (uses nothing of the handler)
    Validator(config=config).validate(str(home / "lab.ipynb"))
    seen = json.loads(report.read_text())
    assert seen["info"]["transport"] == "ipc" and seen["tcp"] == []
    assert Path(seen["file"]).parent == folder and seen["file_mode"] & 0o077 == 0
    assert Path(seen["info"]["ip"]).parent == folder
    assert not list(folder.iterdir())  # cleaned up after the validation
    # each validation names its kernel anew (two at once never share a socket)
    assert ValidateAssignmentHandler.load_config(None).KernelManager.ip != seen["info"]["ip"]


def test_the_hub_gives_each_user_their_runtime_folder_and_refuses_one_a_socket_cannot_name(hub, monkeypatch):
    folder = course_hub.runtime_dir(ME)
    assert folder == course_hub.runtime_root() / str(os.geteuid())
    assert stat.S_IMODE(course_hub.runtime_root().stat().st_mode) == 0o711  # users pass, none lists
    course_hub.make_runtime_dir(ME)
    folder.chmod(0o755)  # opened since, by its user
    course_hub.make_runtime_dir(ME)  # the next start closes it again
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    course_hub.check_socket_paths({ME: STUDENT, "daemon": INSTRUCTOR})
    monkeypatch.setenv("COURSE_HUB_STATE", "/srv/" + "a-very-long-folder-name/" * 3)
    with pytest.raises(HubError, match="too long a path for the users' kernels"):
        course_hub.check_socket_paths({ME: STUDENT})


@pytest.mark.skipif(not AS_ROOT, reason="gives folders to other users: run as root")
def test_a_runtime_folder_is_its_users_and_the_root_of_them_the_hubs(hub):
    daemon = pwd.getpwnam("daemon")
    folder = course_hub.make_runtime_dir("daemon")
    assert (folder.stat().st_uid, folder.stat().st_gid) == (daemon.pw_uid, daemon.pw_gid)
    root = course_hub.runtime_root()
    os.chown(root, daemon.pw_uid, daemon.pw_gid)  # made by a user: they could put links in it
    with pytest.raises(HubError, match="is not a folder of the hub's"):
        course_hub.make_runtime_root()
