"""An instructor's nbgrader course in a temporary folder, for the tests that go through nbgrader's
own commands: the repository's config and sources, an exchange every user may write, a lab
generated and released."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from autograder.pipeline import SOLUTIONS
from cluster.settings import ROOT

COURSE_ID = "kafka-course"


def run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{' '.join(cmd[:2])} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@dataclass
class Course:
    folder: Path
    env: dict  # the instructor's
    common: list[str]  # the exchange's options, for every exchange command
    nbgrader: str
    tmp: Path

    def instructor(self, *args: str) -> str:
        return run([self.nbgrader, *args], self.folder, self.env)

    def student_env(self, name: str) -> tuple[Path, dict]:
        """A home of the student's own, as on a hub: nbgrader keeps their submissions in it."""
        home = self.tmp / f"home-{name}"
        home.mkdir()
        return home, {**self.env, "HOME": str(home), "JUPYTER_DATA_DIR": str(home / ".local/share/jupyter")}


def released(tmp_path: Path, lab: str) -> Course:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)
    common = [f"--Exchange.root={exchange}", f"--CourseDirectory.course_id={COURSE_ID}", "--log-level=WARN"]
    folder = tmp_path / "course"
    folder.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", folder)
    shutil.copytree(SOLUTIONS, folder / "solutions")
    (folder / ".nbgrader").mkdir()
    course = Course(folder, env, common, str(bin_dir / "nbgrader"), tmp_path)
    course.instructor("generate_assignment", lab, "--force", "--log-level=WARN")
    course.instructor("release_assignment", lab, *common)
    return course
