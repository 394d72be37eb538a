"""Where Kafka is, and which topic and group names are yours.

The same notebook runs in three modes, told apart by the environment:
- local   (default) the three JVMs of `python -m cluster up` on this machine;
- compose the containers of docker-compose.yml (its JupyterLab sets COURSE_MODE=compose);
- hosted  a cluster a JupyterHub admin runs (set KAFKA_BOOTSTRAP_SERVERS per user).
KAFKA_BOOTSTRAP_SERVERS, when set, always wins.

Several students, or several grading runs, can share one cluster: each works in a
namespace, a prefix on its topic and group names (LAB_NAMESPACE, else the user's name).
"""

from __future__ import annotations

import getpass
import os
import re

from .settings import Settings

MODES = ("local", "compose", "hosted")
COMPOSE_BOOTSTRAP = "kafka-1:19092,kafka-2:19092,kafka-3:19092"


def mode() -> str:
    m = os.environ.get("COURSE_MODE", "local")
    if m not in MODES:
        raise ValueError(f"COURSE_MODE={m!r}; it must be one of {', '.join(MODES)}")
    return m


def bootstrap_servers() -> str:
    """The bootstrap servers for this mode, as "host:port,host:port,..."."""
    explicit = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if explicit:
        return explicit
    m = mode()
    if m == "compose":
        return COMPOSE_BOOTSTRAP
    if m == "hosted":
        raise ValueError("COURSE_MODE=hosted needs KAFKA_BOOTSTRAP_SERVERS; ask your course admin.")
    return Settings.from_env().bootstrap_servers


def namespace() -> str:
    """The prefix of your topic and group names: LAB_NAMESPACE, else your user name, made
    safe for Kafka names (letters, digits, '-')."""
    raw = os.environ.get("LAB_NAMESPACE") or getpass.getuser()
    ns = re.sub(r"[^a-z0-9-]+", "-", raw.lower()).strip("-")
    if not ns:
        raise ValueError(f"namespace {raw!r} has no usable characters; set LAB_NAMESPACE")
    return ns[:100]


def topic_name(name: str) -> str:
    """Your topic called `name`: "<namespace>.<name>"."""
    return f"{namespace()}.{name}"


def group_name(name: str) -> str:
    """Your consumer group called `name`: "<namespace>.<name>"."""
    return f"{namespace()}.{name}"
