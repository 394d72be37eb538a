"""What the course's JupyterHub does for each user; hub/jupyterhub_config.py wires it in.

Who may log in: the students of the roster (COURSE_HUB_STUDENTS, one login name per line) and
the instructors (COURSE_HUB_INSTRUCTORS), as local users of the machine (PAM). Each user's
server runs as that user, in their home folder, with:
- the course's environment (COURSE_HUB_ENV: a virtual environment holding the student kit,
  which every user can run; never the instructors' checkout, which holds the solutions);
- a Kafka login of their own on the shared cluster, allowed their namespace (their login name)
  and nothing else, made (or its password reset) each time their server starts;
- nbgrader's exchange (COURSE_HUB_EXCHANGE) and the course id, so the Assignments panel
  fetches and submits.
- its kernels on ipc, not TCP: their connection files and sockets in a runtime folder that the
  hub makes for the user alone (0700), which no other user's process can reach (on TCP ports any
  user could subscribe to a kernel's output and read every cell's code and result).
Students get the Assignments panel and Validate, not the instructors' menus. Instructors also
get the formgrader on the course folder (COURSE_HUB_COURSE, a checkout of the kit with
solutions/, readable by the instructors only), the grading code from it, and the course's
admin login on Kafka (autograding makes a user per grading, as everywhere).

The formgrader is a frame of the instructor's own server. JupyterHub (4.1 and later) forbids
framing single-user servers, since on one origin a student's page could frame an instructor's.
With per-user subdomains (COURSE_HUB_SUBDOMAIN_HOST) each server is an origin of its own and
the instructors' servers allow frames from themselves only; without subdomains the instructors
open the formgrader as a page (<their server>/formgrader) instead of the panel.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import stat
import sys
from pathlib import Path

from autograder.exchange import local_uid
from autograder.sandbox import readable_by_all, runs_as_another_user
from cluster import accounts
from cluster.k8s import NAME, read_roster
from cluster.settings import ROOT, env, env_path, jars_cache

COURSE_ID = "kafka-course"
STUDENT, INSTRUCTOR = "student", "instructor"

# nbgrader's lab plugins and server extensions that only instructors get. The course list is
# for hubs with several courses (it asks the hub's services); this hub serves one, so nobody
# gets it. (staff/kit.py hides more on a laptop, where there is no exchange.)
INSTRUCTOR_PLUGINS = ("@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment")
INSTRUCTOR_EXTENSIONS = ("nbgrader.server_extensions.formgrader",)
NOBODYS_PLUGINS = (
    "@jupyter/nbgrader:course-list",
    # JupyterLab's "get notified about Jupyter news?" (the hub's admins decide)
    "@jupyterlab/apputils-extension:announcements",
)
NOBODYS_EXTENSIONS = ("nbgrader.server_extensions.course_list",)

# Each kernel's sockets are files <runtime folder>/kernel-<its id>-ipc-<1..5> (jupyter_client's
# names), and a socket's path holds at most 107 bytes on Linux (sockaddr_un).
IPC_PATH_MAX = 107
LONGEST_SOCKET = f"nbgrader-{'0' * 36}-ipc-5"  # Validate's (below): the longest name

# nbgrader's Validate runs the notebook in a kernel of its own, started by nbclient with nbgrader's
# config (not the server's), which it loads again for each notebook it validates. A Python file, so
# that each load names the kernel's files anew, in the runtime folder of the user who loads it.
NBGRADER_KERNELS = """\
# Written by the course's hub (hub/course_hub.py): the kernels nbgrader starts (Validate) listen
# on ipc sockets in the user's own runtime folder, not on TCP ports every user can reach.
import os
import uuid

from jupyter_core.paths import jupyter_runtime_dir

c = get_config()  # noqa: F821 - provided by nbgrader
where = os.path.join(jupyter_runtime_dir(), f"nbgrader-{uuid.uuid4()}")
c.KernelManager.transport = "ipc"
c.KernelManager.connection_file = where + ".json"
c.KernelManager.ip = where + "-ipc"
"""


class HubError(SystemExit):
    """The hub cannot serve the course as configured: what is wrong and what to do."""

    def __init__(self, what: str, todo: str):
        super().__init__(f"The course's JupyterHub cannot start: {what}\n  What to do: {todo}")


# --- settings -----------------------------------------------------------------------------
def state_dir() -> Path:
    return env_path("COURSE_HUB_STATE")


def user_env() -> Path:
    return Path(env("COURSE_HUB_ENV") or state_dir() / "env")


def private_dir() -> Path:
    """The hub's database and cookie secret: root's only (prepare() makes it)."""
    return state_dir() / "private"


def runtime_root() -> Path:
    """The users' Jupyter runtime folders (runtime/<uid>): the hub's, which users pass through
    (0711) to their own but cannot list, and in which none can make or rename anything."""
    return state_dir() / "runtime"


def runtime_dir(name: str) -> Path:
    """`name`'s Jupyter runtime folder (JUPYTER_RUNTIME_DIR): their kernels' connection files and
    ipc sockets, and their server's own files. Short, whatever the home: a socket's path is short."""
    return runtime_root() / str(pwd.getpwnam(name).pw_uid)


def course_dir() -> Path:
    return env_path("COURSE_HUB_COURSE")


def exchange_dir() -> Path:
    return env_path("COURSE_HUB_EXCHANGE")


def roles() -> dict[str, str]:
    """Login name -> STUDENT or INSTRUCTOR."""
    roster = env("COURSE_HUB_STUDENTS")
    if not roster or not Path(roster).is_file():
        raise HubError(
            f"COURSE_HUB_STUDENTS={roster!r} is not a file.",
            "Write the students' login names there, one per line, and set COURSE_HUB_STUDENTS to it.",
        )
    found = {name: STUDENT for name in read_roster(Path(roster))}
    for name in (env("COURSE_HUB_INSTRUCTORS") or "").split(","):
        if name.strip():
            found[name.strip()] = INSTRUCTOR
    if INSTRUCTOR not in found.values():
        raise HubError(
            "no instructor: COURSE_HUB_INSTRUCTORS is empty.",
            "Set COURSE_HUB_INSTRUCTORS to the instructors' login names, separated by commas.",
        )
    # a login is also its Kafka user and namespace: never one of the course's own users
    bad = [n for n in found if not NAME.match(n) or n in accounts.SUPER_USERS or n.startswith("grade-")]
    if bad:
        raise HubError(
            f"{', '.join(bad[:5])} cannot be a login here: each login is also a Kafka user and the "
            "prefix of its topics.",
            "Use login names of lower-case letters, digits and '-' (at most 52, no '-' first or last), not "
            f"{' or '.join(accounts.SUPER_USERS)} and not starting with 'grade-' (the gradings').",
        )
    admin = env("COURSE_HUB_ADMIN")
    if admin and found.get(admin) != INSTRUCTOR:
        raise HubError(
            f"COURSE_HUB_ADMIN={admin!r} is not an instructor: the hub's admin may act as any user.",
            "Give that role to an instructor (COURSE_HUB_INSTRUCTORS), or unset COURSE_HUB_ADMIN.",
        )
    return found


def size_cluster() -> str:
    """The shared cluster sized for the roster (cluster/capacity.py): each broker's heap, unless
    the admin set COURSE_BROKER_HEAP; a HubError with the numbers for a class one cluster cannot
    hold."""
    from cluster import capacity

    plan = capacity.plan(sum(role == STUDENT for role in roles().values()))
    if not plan.fits:
        raise HubError(plan.summary(), plan.advice())
    os.environ.setdefault("COURSE_BROKER_HEAP", f"{plan.heap_mb}m")
    return f"{plan.summary()}; each broker's heap: {env('COURSE_BROKER_HEAP')}."


# --- what each role's server reads: a Jupyter config folder per role ----------------------------
def jupyter_config(role: str, subdomains: bool) -> dict[str, object]:
    """File name -> content (JSON, or a str: the file's text) of one role's Jupyter config folder
    (put first on JUPYTER_CONFIG_PATH)."""
    hidden = NOBODYS_PLUGINS + (INSTRUCTOR_PLUGINS if role == STUDENT else ())
    off = NOBODYS_EXTENSIONS + (INSTRUCTOR_EXTENSIONS if role == STUDENT else ())
    server: dict = {
        "ServerApp": {"jpserver_extensions": {name: False for name in off}},
        # Every kernel the server starts (notebooks, consoles) binds ipc sockets next to its
        # connection file, kernel-<id>.json in the runtime folder, rather than TCP ports on
        # 127.0.0.1 that any user's process can connect to.
        "KernelManager": {"transport": "ipc"},
    }
    if role == INSTRUCTOR and subdomains:
        # The formgrader panel frames this server's own /formgrader: allow frames from this
        # origin, which with subdomains is this instructor's server and nothing else.
        server["ServerApp"]["tornado_settings"] = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
    return {
        "nbgrader_config.json": {
            "CourseDirectory": {"course_id": COURSE_ID},
            "Exchange": {"root": str(exchange_dir())},
        },
        "nbgrader_config.py": NBGRADER_KERNELS,
        "labconfig/page_config.json": {"disabledExtensions": {name: True for name in hidden}},
        "jupyter_server_config.json": server,
    }


def file_text(content: object) -> str:
    return content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"


def subdomains() -> bool:
    return bool(env("COURSE_HUB_SUBDOMAIN_HOST"))


def jupyter_config_folders() -> dict[str, Path]:
    """Role -> its Jupyter config folder (written by write_jupyter_configs)."""
    return {role: state_dir() / "jupyter" / role for role in (STUDENT, INSTRUCTOR)}


def write_jupyter_configs(subdomains: bool) -> dict[str, Path]:
    folders = {}
    for role in (STUDENT, INSTRUCTOR):
        folder = folders[role] = state_dir() / "jupyter" / role
        for name, content in jupyter_config(role, subdomains).items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(file_text(content))
            path.chmod(0o644)
    for path in [state_dir(), *(state_dir() / "jupyter").rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)  # every user's server reads its role's folder
    return folders


def make_runtime_root() -> Path:
    """runtime_root(), the hub's (prepare() makes it): if a user had made it, they could swap
    another's folder in it for a link of theirs."""
    root = runtime_root()
    root.mkdir(exist_ok=True)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise HubError(
            f"{root} is not a folder of the hub's (uid {os.geteuid()}).",
            f"Remove it (rm -r {root}) and prepare the hub again.",
        )
    root.chmod(0o711)
    return root


def make_runtime_dir(name: str) -> Path:
    """`name`'s runtime folder, theirs alone (0700), made or given back to them at each start of
    their server (whatever they did to its mode since). Its entry is the hub's to make: no link
    of a user's can stand in its place."""
    user = pwd.getpwnam(name)
    folder = runtime_dir(name)
    folder.mkdir(mode=0o700, exist_ok=True)
    if not stat.S_ISDIR(folder.lstat().st_mode):
        raise RuntimeError(f"{folder} is not a folder")
    os.chown(folder, user.pw_uid, user.pw_gid, follow_symlinks=False)
    folder.chmod(0o700)
    return folder


# --- Kafka: a login per user on the shared cluster ---------------------------------------------
def admin_login() -> tuple[str, str]:
    """The course admin's bootstrap servers and password: another cluster's if
    KAFKA_ADMIN_PASSWORD is set, else the local cluster of this checkout (the hub runs as root
    and reads its secrets)."""
    from cluster.clients import admin_connection

    found = admin_connection()
    return found["bootstrap_servers"], found["sasl_plain_password"]


def students_servers() -> str:
    """Where users' clients connect: KAFKA_BOOTSTRAP_SERVERS, else the local cluster's."""
    from cluster.settings import Settings

    return env("KAFKA_BOOTSTRAP_SERVERS") or Settings.from_env().bootstrap_servers


def kafka_login(name: str) -> dict[str, str]:
    """The environment that logs `name` in to Kafka with a namespace of its own: a new password
    each time, so a password seen once (an old notebook's output) stops working."""
    from cluster.clients import admin_client

    account = accounts.Account(name, accounts.new_password())
    with admin_client("course-hub", request_timeout_ms=15_000) as admin:
        accounts.setup_cluster(admin)
        accounts.grant(admin, account, name)
    return {
        "COURSE_MODE": "hosted",
        "LAB_NAMESPACE": name,
        "KAFKA_USERNAME": name,
        "KAFKA_PASSWORD": account.password,
        "KAFKA_BOOTSTRAP_SERVERS": students_servers(),
    }


def revoke_kafka_login(name: str) -> None:
    """`name`'s Kafka password and ACLs deleted (its topics stay): nothing it left running after its
    server stopped (a script started with nohup, a password copied elsewhere) reaches Kafka."""
    from cluster.clients import admin_client

    with admin_client("course-hub", request_timeout_ms=15_000) as admin:
        accounts.revoke(admin, name)


# --- the spawner's hooks ----------------------------------------------------------------------
def jupyter_environment(name: str, role: str, configs: dict[str, Path]) -> dict[str, str]:
    """What tells a user's server, and the Jupyter apps it and its terminals run, their settings:
    their role's config folder, and their runtime folder (make_runtime_dir makes it)."""
    return {
        "PATH": f"{user_env() / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": str(configs[role]),
        "JUPYTER_RUNTIME_DIR": str(runtime_dir(name)),
    }


def server_environment(name: str, role: str, configs: dict[str, Path]) -> dict[str, str]:
    found = {
        **kafka_login(name),
        **jupyter_environment(name, role, configs),
        # lab 7's clusters of one's own, in one's home (the course's folder is not the users' to write)
        "COURSE_OWN_CLUSTER_HOME": str(Path(pwd.getpwnam(name).pw_dir) / ".kafka-course" / "own-cluster"),
    }
    if readable_by_all(jars_cache()):
        found["COURSE_JARS_CACHE"] = str(jars_cache())  # labs 8-10's jars, fetched once for all
    if role == INSTRUCTOR:
        servers, password = admin_login()
        found.update(
            {
                # the course folder's grader, cluster code and nbgrader_config.py come first
                "PYTHONPATH": str(course_dir()),
                # and never a module of a student's that sits in the folder a kernel starts in
                # (an instructor opening a collected submission)
                "PYTHONSAFEPATH": "1",
                "JUPYTER_CONFIG_PATH": f"{configs[role]}:{course_dir()}",
                "KAFKA_ADMIN_BOOTSTRAP_SERVERS": servers,
                "KAFKA_ADMIN_PASSWORD": password,
            }
        )
    return found


def pre_spawn_hook(configs: dict[str, Path], who: dict[str, str]):
    async def hook(spawner) -> None:
        name = spawner.user.name
        role = who.get(name)
        if role is None:  # the authenticator lets in only these; a second guard
            raise RuntimeError(f"{name} is not on the course's roster")
        await asyncio.to_thread(make_runtime_dir, name)
        found = await asyncio.to_thread(server_environment, name, role, configs)
        spawner.environment.update(found)
        spawner.log.info("course: %s starts as %s with Kafka namespace %r", name, role, name)

    return hook


def post_stop_hook():
    async def hook(spawner) -> None:
        name = spawner.user.name
        await asyncio.to_thread(revoke_kafka_login, name)
        spawner.log.info("course: %s stopped; its Kafka login is revoked until its next start", name)

    return hook


# --- checks at the hub's start: refuse with a message rather than fail a user later -----------------
def check_root() -> None:
    if os.geteuid() != 0:
        raise HubError(
            "it is not running as root, and only root can start servers as the users.",
            "Start it as root with the settings: `sudo -E make hub` (-E keeps COURSE_HUB_*).",
        )


def check(who: dict[str, str]) -> None:
    """Everything a user would otherwise meet later as a failure, checked before the hub starts."""
    python = user_env() / "bin" / "python"
    if not (user_env() / "bin" / "jupyterhub-singleuser").exists():
        raise HubError(
            f"{user_env()} has no jupyterhub-singleuser.",
            "Run `python -m hub install`, or point COURSE_HUB_ENV at the course's environment.",
        )
    if not runs_as_another_user(str(python)):
        raise HubError(
            f"the users cannot run {python}: a folder on its way (e.g. /root) is private.",
            "Make the environment from a Python that every user can run: "
            "python -m hub install --python /usr/bin/python3.",
        )
    course = course_dir()
    if not (course / "solutions").is_dir() or not (course / "nbgrader_config.py").exists():
        raise HubError(
            f"COURSE_HUB_COURSE={course} is not a checkout of the course (no solutions/ or nbgrader_config.py).",
            "Set COURSE_HUB_COURSE to the instructors' copy of the kit.",
        )
    # The solutions, the grading secret, the gradebook and every collected submission live in
    # the course folder; the hub's own checkout holds solutions too.
    for folder in dict.fromkeys([course.resolve(), ROOT.resolve()]):
        if folder.stat().st_mode & 0o007:
            raise HubError(
                f"every user may enter {folder}, which holds the solutions (and, in the course "
                "folder, the gradebook and the submissions).",
                f"chmod o-rwx {folder}",
            )
    if proxy() is None:
        raise HubError(
            "configurable-http-proxy (JupyterHub's proxy, from npm) is not installed.",
            "Run `python -m hub install` (it puts the pinned one in the users' environment).",
        )
    if not readable_by_all(state_dir() / "jupyter"):
        raise HubError(
            f"not every user can read {state_dir()}.",
            f"chmod a+rX {state_dir()}, or set COURSE_HUB_STATE to a folder all can read.",
        )
    missing = [name for name in who if local_uid(name) is None]
    if missing:
        raise HubError(
            f"no local user for {', '.join(missing[:5])}.",
            "Create them (useradd -m NAME; passwd NAME), or remove them from the roster.",
        )
    check_socket_paths(who)
    open_homes = [name for name in who if Path(pwd.getpwnam(name).pw_dir).stat().st_mode & 0o007]
    if open_homes:
        raise HubError(
            f"other users may enter the home of {', '.join(open_homes[:5])} (their notebooks).",
            "chmod 700 each home (and set HOME_MODE 0700 in /etc/login.defs for new users).",
        )
    try:
        from cluster.clients import admin_client

        admin_client("course-hub-check", request_timeout_ms=10_000).close()
    except Exception as e:
        raise HubError(
            f"the course's Kafka cluster does not answer its admin ({type(e).__name__}: {e}).",
            "Start it (`python -m hub run` does), or set KAFKA_ADMIN_BOOTSTRAP_SERVERS and "
            "KAFKA_ADMIN_PASSWORD for a cluster run elsewhere.",
        ) from None


def check_socket_paths(who: dict[str, str]) -> None:
    """The users' kernels' sockets fit in a socket's path (else no kernel of theirs would start)."""
    too_long = [n for n in who if len(str(runtime_dir(n) / LONGEST_SOCKET)) > IPC_PATH_MAX]
    if too_long:
        raise HubError(
            f"COURSE_HUB_STATE={state_dir()} is too long a path for the users' kernels: their sockets "
            f"({runtime_dir(too_long[0]) / LONGEST_SOCKET}) may have {IPC_PATH_MAX} characters at most.",
            "Set COURSE_HUB_STATE to a shorter path (its default: /srv/kafka-course-hub).",
        )


def proxy() -> str | None:
    """JupyterHub's proxy: the pinned one `python -m hub install` put in the users' environment,
    else the hub's environment's, else one on the PATH."""
    for folder in (user_env() / "bin", Path(sys.prefix) / "bin"):
        if (folder / "configurable-http-proxy").exists():
            return str(folder / "configurable-http-proxy")
    return shutil.which("configurable-http-proxy")


def prepare() -> dict[str, Path]:
    """Everything the hub needs before it starts, checked and made (`python -m hub prepare`;
    `python -m hub run` does it first): root, the roster, each role's Jupyter config, what users
    would otherwise meet later as failures, nbgrader's exchange, the folder of the users' runtime
    folders, the hub's private folder. The config file (jupyterhub_config.py) only reads what this
    made."""
    check_root()
    who = roles()
    configs = write_jupyter_configs(subdomains=subdomains())
    check(who)
    prepare_exchange()
    make_runtime_root()
    private_dir().mkdir(parents=True, exist_ok=True)
    private_dir().chmod(0o700)
    return configs


def prepared() -> dict[str, Path]:
    """The config folders prepare() wrote; a HubError saying to run it if they are missing or
    were written with other settings."""
    folders = jupyter_config_folders()
    missing = [str(f) for f in folders.values() if not (f / "jupyter_server_config.json").is_file()]
    missing += [str(f) for f in (private_dir(), runtime_root()) if not f.is_dir()]
    if missing:
        raise HubError(
            f"the hub has not been prepared ({', '.join(missing)} missing).",
            "Run `sudo -E python -m hub prepare` first (`python -m hub run` prepares, then starts it).",
        )
    for role, folder in folders.items():
        if any(
            not (folder / name).is_file() or (folder / name).read_text() != file_text(content)
            for name, content in jupyter_config(role, subdomains()).items()
        ):
            raise HubError(
                f"{role}s' Jupyter config was prepared with other settings (COURSE_HUB_SUBDOMAIN_HOST, "
                "COURSE_HUB_EXCHANGE) or by an older version of the hub.",
                "Run `sudo -E python -m hub prepare` again with this environment.",
            )
    return folders


def prepare_exchange() -> None:
    """nbgrader's exchange, made by the hub before any student can touch it. nbgrader wants the
    top folder writable by every user (it checks, students' fetch included); sticky, so that
    nobody but its owner may rename or remove the course's folder, which the hub makes first and
    gives to the owner of the course folder, the instructor who releases. Students may write
    into inbound but neither read it nor rename another's submission (sticky too); outbound and
    feedback they only read."""
    course = course_dir().stat()
    top = exchange_dir()
    top.mkdir(parents=True, exist_ok=True)
    os.chown(top, 0, 0)
    top.chmod(0o1777)
    modes = {
        top / COURSE_ID: 0o755,
        top / COURSE_ID / "outbound": 0o755,
        top / COURSE_ID / "inbound": 0o3733,
        top / COURSE_ID / "feedback": 0o711,
    }
    for folder, mode in modes.items():
        if not folder.exists():
            folder.mkdir()
            os.chown(folder, course.st_uid, course.st_gid)
            folder.chmod(mode)
        info = folder.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != course.st_uid:
            raise HubError(
                f"{folder} is not a folder of the course's owner (uid {course.st_uid}); a user may "
                "have made it before the hub did.",
                f"Remove it (rm -r {folder}) and start the hub again.",
            )
