"""Collect on a shared exchange (autograder/exchange.py), with real nbgrader and this machine's
users: a submission in another user's name, one holding a link to a file the student cannot
read, and a backdated one. (root and daemon are users of every Debian machine.)"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.settings import ROOT

LAB, COURSE_ID = "lab1", "kafka-course"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes submissions owned by other users: run as root")


def submission(inbound: Path, student: str, when: str, owner: str = "root", **files: str) -> Path:
    entry = inbound / f"{student}+{LAB}+{when} UTC"
    entry.mkdir()
    (entry / "timestamp.txt").write_text(f"{when} UTC")
    for name, text in files.items():
        (entry / name).write_text(text)
    uid = pwd.getpwnam(owner).pw_uid
    for path in [entry, *entry.iterdir()]:
        os.lchown(path, uid, uid)
    return entry


def collect(course: Path, exchange: Path) -> str:
    bin_dir = Path(sys.executable).parent  # nbgrader runs alembic from there
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [
            str(bin_dir / "nbgrader"),
            "collect",
            LAB,
            f"--Exchange.root={exchange}",
            f"--CourseDirectory.course_id={COURSE_ID}",
        ],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_collect_takes_only_what_the_machine_vouches_for(tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    inbound = exchange / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    secret = tmp_path / "solutions.txt"
    secret.write_text("the answers")
    secret.chmod(0o600)

    # root's own, on time; then a newer one that is a link to a file only the instructor reads
    submission(inbound, "root", "2026-01-10 10:00:00.000000", **{f"{LAB}.ipynb": "root's work"})
    linked = submission(inbound, "root", "2026-01-11 10:00:00.000000")
    (linked / f"{LAB}.ipynb").symlink_to(secret)
    # daemon's name on a submission root made
    submission(inbound, "daemon", "2026-01-10 10:00:00.000000", owner="root", **{f"{LAB}.ipynb": "forged"})
    # a course id that is not a user here (not checkable for its owner), backdated to 2020
    submission(inbound, "ext-student", "2020-01-01 00:00:00.000000", **{f"{LAB}.ipynb": "late work"})

    log = collect(course, exchange)
    submitted = course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["ext-student", "root"], log
    assert (submitted / "root" / LAB / f"{LAB}.ipynb").read_text() == "root's work"  # not the link's target
    assert "is a link or a special file" in log and "owned by root, not by daemon" in log
    assert "the answers" not in "".join(p.read_text() for p in submitted.rglob("*") if p.is_file())
    # the backdated one counts from when it arrived (this year), not from what it claims
    stamp = (submitted / "ext-student" / LAB / "timestamp.txt").read_text()
    assert not stamp.startswith("2020"), stamp
    assert "arrived at" in log
