"""The course's JupyterHub on one machine, as root:

    python -m hub install [--python /usr/bin/python3]   the users' environment: the student kit
                        and its pinned packages (COURSE_HUB_STATE/env), JupyterHub's proxy
    python -m hub prepare   the checks, each role's Jupyter config, nbgrader's exchange, the
                        users' runtime folders (what jupyterhub_config.py reads; run again after
                        changing COURSE_HUB_*)
    python -m hub run   the jars in a cache every user reads, the shared cluster, prepare, the hub

(`sudo -E make hub` does both.) hub/course_hub.py says what each user's server gets."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from . import course_hub


def install(python: str) -> Path:
    """The student kit (never the instructors' checkout: it holds the solutions) installed in a
    virtual environment every user can run, with the pinned JupyterHub proxy beside it."""
    from staff import kit
    from cluster.settings import pins

    state = course_hub.state_dir()
    state.mkdir(parents=True, exist_ok=True)
    target = course_hub.user_env()
    print(f"The student kit in {state / 'kit'} ...", flush=True)
    kit.build(state / "kit")
    print(f"Its environment in {target} (from {python}) ...", flush=True)
    subprocess.run([python, "-m", "venv", str(target)], check=True)
    pip = [str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # the packages as the course locked them (jupyterhub-singleuser too), then the kit over them
    subprocess.run([*pip, "--require-hashes", "-r", str(state / "kit" / "requirements" / "hub.txt")], check=True)
    subprocess.run(
        [*pip, "--no-deps", "-e", str(state / "kit")],
        check=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore:Editable installation"),
    )
    proxy = f"configurable-http-proxy@{pins()['npm']['configurable-http-proxy']}"
    print(f"JupyterHub's proxy ({proxy}) ...", flush=True)
    subprocess.run(
        ["npm", "install", "--global", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error", proxy],
        check=True,
    )
    subprocess.run(["chmod", "-R", "a+rX", str(state / "kit"), str(target)], check=True)
    print(f"Done. Users' servers run {target / 'bin' / 'jupyterhub-singleuser'}.")
    return target


def run() -> None:
    from cluster import jars
    from cluster.brokers import Cluster
    from cluster.settings import jars_cache, pins

    # labs 8-10 start JVMs with the pinned jars: one cache for all users, readable by all
    os.environ.setdefault("COURSE_JARS_CACHE", str(course_hub.state_dir() / "jars"))
    for name in pins()["maven"]:
        jars.jars(name)
    subprocess.run(["chmod", "-R", "a+rX", str(jars_cache())], check=True)
    print(f"The shared cluster: {course_hub.size_cluster()}", flush=True)
    print(f"The shared cluster: {Cluster().up()}", flush=True)
    from cluster.postgres import missing

    if why := missing():  # the users' change-data-capture lab runs PostgreSQL as them: say so, never fail
        print(f"Note: {why}", flush=True)
    course_hub.prepare()
    config = Path(__file__).with_name("jupyterhub_config.py")
    hub = Path(sys.prefix) / "bin" / "jupyterhub"
    os.chdir(course_hub.private_dir())
    os.execv(str(hub), [str(hub), "-f", str(config)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m hub", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("install", help="the users' environment and JupyterHub's proxy")
    i.add_argument(
        "--python", default="/usr/bin/python3", help="a Python 3.11+ that every user can run (not one under /root)"
    )
    sub.add_parser("prepare", help="the checks and what the config file reads (run does it too)")
    sub.add_parser("run", help="jars, the shared cluster, prepare, then JupyterHub")
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit(
            "python -m hub runs as root (it starts servers as the users): use sudo -E (-E keeps COURSE_HUB_*)."
        )
    if a.action == "install":
        install(a.python)
    elif a.action == "prepare":
        print(f"Prepared: {', '.join(map(str, course_hub.prepare().values()))}")
    else:
        run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
