"""nbgrader's collect, for an exchange that students share (a hub): it believes what the kernel
says about a submission, not what the submission says about itself.

nbgrader's own collect takes a submission folder's name for who submitted it and its
timestamp.txt for when, and copies it following symbolic links, while every user may write into
the exchange's inbound folder. So a student could submit in another student's name, backdate a
late submission, or submit a link to a file only the instructor can read (the solutions), which
the instructor's collect would copy and autograde. CheckedCollect (nbgrader_config.py):
- skips a submission that is not wholly owned by the student it names, where that name is a
  user of this machine (as on a hub; course ids that are not users cannot be checked);
- skips one that holds anything but folders and regular files (links, pipes, devices), and
  copies without following links, so a file swapped for a link mid-copy is refused too;
- takes as its time the latest change the kernel saw in it (ctime, which no user can set back)
  when the submission claims an earlier one.
"""

from __future__ import annotations

import datetime
import glob
import os
import pwd
import shutil
import stat

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.utils import ignore_patterns

# submit writes timestamp.txt, then copies and sets permissions: seconds apart at most
CLOCK_SLACK = datetime.timedelta(minutes=2)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"


def local_uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def untrusted(path: str, student: str) -> str | None:
    """Why this inbound entry cannot be the student's own submission, or None."""
    uid = local_uid(student)
    for folder, dirs, files in os.walk(path, followlinks=False):
        for name in [".", *dirs, *files]:
            entry = os.path.normpath(os.path.join(folder, name))
            info = os.lstat(entry)
            where = os.path.relpath(entry, path)
            if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode)):
                return f"{where} is a link or a special file"
            if uid is not None and info.st_uid != uid:
                try:
                    owner = pwd.getpwuid(info.st_uid).pw_name
                except KeyError:
                    owner = str(info.st_uid)
                return f"{where} is owned by {owner}, not by {student}"
    return None


def arrival(path: str) -> datetime.datetime:
    """The last change the kernel recorded in the entry (ctime), in UTC (naive, as nbgrader's)."""
    latest = max(
        os.lstat(os.path.join(folder, name)).st_ctime
        for folder, dirs, files in os.walk(path)
        for name in [".", *dirs, *files]
    )
    return datetime.datetime.fromtimestamp(latest, datetime.UTC).replace(tzinfo=None)


def _copy_regular_file(src: str, dst: str) -> str:
    """copytree's copy function: a regular file only, never through a link, never blocking on a pipe."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise OSError(f"{src} is not a regular file")
        with open(dst, "wb") as target:
            shutil.copyfileobj(source, target)
    return dst


class CheckedCollect(ExchangeCollect):
    def init_src(self):
        super().init_src()  # the inbound folder, the due date; its own choice is redone below
        student = self.coursedir.student_id or "*"
        pattern = os.path.join(self.inbound_path, f"{student}+{self.coursedir.assignment_id}+*")
        by_student: dict[str, list[dict]] = {}
        for path in glob.glob(pattern):
            record = self._path_to_record(path)
            why = untrusted(path, record["username"])
            if why:
                self.log.warning("Not collected: %s (%s). It may be an attempt to cheat.", path, why)
                continue
            came = arrival(path)
            record["claimed"] = record["timestamp"]
            if record["timestamp"] < came - CLOCK_SLACK:
                self.log.warning(
                    "%s claims to be from %s but arrived at %s: the arrival counts.", path, record["timestamp"], came
                )
                record["timestamp"] = came
            by_student.setdefault(record["username"], []).append(record)
        self.src_records = [self._choose(records) for records in by_student.values()]

    def _choose(self, records: list[dict]) -> dict:
        """The newest submission; with before_duedate, the newest one on time if there is one."""
        newest_first = sorted(records, key=lambda r: r["timestamp"], reverse=True)
        if self.duedate is not None and self.before_duedate:
            on_time = [r for r in newest_first if r["timestamp"] <= self.duedate]
            if on_time:
                return on_time[0]
        return newest_first[0]

    def do_copy(self, src, dest, log=None):
        size = self.get_size(src)
        if size > 1000 * self.coursedir.max_dir_size:
            raise RuntimeError(f"{src} is too big to collect: {size} bytes")
        # symlinks=True: a link is copied as a link, never followed, and then refused below
        shutil.copytree(
            src,
            dest,
            symlinks=True,
            copy_function=_copy_regular_file,
            ignore=ignore_patterns(
                exclude=self.coursedir.ignore,
                include=self.coursedir.include,
                max_file_size=self.coursedir.max_file_size,
                log=self.log,
            ),
        )
        why = untrusted(dest, "")
        if why:
            shutil.rmtree(dest)
            raise RuntimeError(f"{src} changed while it was collected: {why}")

    def copy_files(self):
        super().copy_files()
        for record in self.src_records:  # the time that counts for lateness, where it was backdated
            if record["timestamp"] != record["claimed"]:
                dest = self.coursedir.format_path(
                    self.coursedir.submitted_directory, record["username"], self.coursedir.assignment_id
                )
                with open(os.path.join(dest, "timestamp.txt"), "w") as f:
                    f.write(record["timestamp"].strftime(TIME_FORMAT))
