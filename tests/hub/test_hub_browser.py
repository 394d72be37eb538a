"""The course's JupyterHub as its users meet it, in a real browser (Debian's chromium, driven by
Playwright). Local users of this machine log in with their passwords (PAM). The instructor
generates and releases lab 1 in the formgrader panel; a student fetches it in the Assignments
panel, runs it in JupyterLab against their own namespace on the shared cluster, sees every
self-check pass, and submits; the instructor collects and autogrades in the formgrader and sees
the student's score. Screenshots of each step go to build/test-artifacts/hub/.

The hub runs as it would for a class (hub/jupyterhub_config.py, `python -m hub install`), with
per-user subdomains (*.hub.test, mapped to this machine in the browser), on the test cluster."""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import autograder as layout
from autograder.pipeline import SOLUTIONS, graded_parts
from cluster.settings import ROOT

LAB = "lab1"
STUDENT, INSTRUCTOR = "kcstudent", "kcteacher"
CHROMIUM = Path("/usr/bin/chromium")
SYSTEM_PYTHON = Path("/usr/bin/python3")
ARTIFACTS = ROOT / "build" / "test-artifacts" / "hub"
# What the instructors' copy of the course holds (a checkout: solutions, grader, cluster, data).
# the course's whole folders (autograder/__init__.py's table), the hub and the instructors' files
COURSE_FILES = (*layout.GRADER, *layout.STUDENT, "staff", "solutions", "nbgrader_config.py", "hub", "pyproject.toml")
XSS = '<img src="nowhere.png" onerror="window.pwned = 1; window.top.pwned = 1">'  # a student's markdown

pytestmark = [pytest.mark.heavy]


def missing() -> str | None:
    if os.geteuid() != 0:
        return "the hub starts servers as other users: run as root"
    for tool in ("useradd", "chpasswd", "userdel", "npm", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not CHROMIUM.exists():
        return "Debian's chromium is not installed (apt install chromium; .ci/run does)"
    if not SYSTEM_PYTHON.exists():
        return f"{SYSTEM_PYTHON} (a Python every user can run) is not installed"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Hub:
    url: str  # the hub, as the browser reaches it (a subdomain host)
    passwords: dict[str, str]
    home: dict[str, Path]
    course: Path
    log: Path

    def server(self, user: str) -> str:
        host = self.url.split("//", 1)[1]
        return f"http://{user}.{host}/user/{user}"


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 900), **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd[:4]))} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def add_user(name: str, home: Path) -> str:
    password = secrets.token_urlsafe(12)
    subprocess.run(["userdel", "-f", name], capture_output=True)  # a leftover of an interrupted run
    run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/bash", name])
    home.chmod(0o700)  # the hub refuses homes other users may enter
    run(["chpasswd"], input=f"{name}:{password}\n")
    return password


def remove_user(name: str) -> None:
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
    for _ in range(50):
        if subprocess.run(["pgrep", "-u", name], capture_output=True).returncode != 0:
            break
        time.sleep(0.1)
    subprocess.run(["userdel", "-f", name], capture_output=True)


def wait_for(url: str, proc: subprocess.Popen, log: Path, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the hub exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the hub did not answer at {url} within {deadline_s} s:\n{log.read_text()[-4000:]}")


@pytest.fixture(scope="module")
def hub(cluster):
    why = missing()
    if why:
        pytest.skip(why)
    # Under /tmp and open to all: every user's server reads the hub's folder (pytest's are private).
    top = Path(tempfile.mkdtemp(prefix="kafka-course-hub-"))
    top.chmod(0o755)
    state, homes = top / "state", top / "home"
    homes.mkdir()
    users = {STUDENT: homes / STUDENT, INSTRUCTOR: homes / INSTRUCTOR}
    passwords = {name: add_user(name, home) for name, home in users.items()}
    (top / "students.txt").write_text(f"# the class\n{STUDENT}\n")

    # the instructors' copy of the course: theirs, and nobody else's
    course = users[INSTRUCTOR] / "kafka-course"
    course.mkdir()
    for name in COURSE_FILES:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, course / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*_pb2*.py"))
        else:
            shutil.copy2(src, course / name)
    run(["chown", "-R", f"{INSTRUCTOR}:{INSTRUCTOR}", str(course)])
    course.chmod(0o700)

    env = {k: v for k, v in os.environ.items() if k not in ("LAB_NAMESPACE", "KAFKA_USERNAME", "KAFKA_PASSWORD")}
    env.update(
        COURSE_HUB_STATE=str(state),
        COURSE_HUB_STUDENTS=str(top / "students.txt"),
        COURSE_HUB_INSTRUCTORS=INSTRUCTOR,
        COURSE_HUB_COURSE=str(course),
        COURSE_HUB_EXCHANGE=str(top / "exchange"),
    )
    # the users' environment, as a host makes it (the system's Python; the student kit)
    run([sys.executable, "-m", "hub", "install", "--python", str(SYSTEM_PYTHON)], env=env, cwd=ROOT, timeout=1500)

    port, hub_port, api_port = free_port(), free_port(), free_port()
    env.update(COURSE_HUB_URL=f"http://127.0.0.1:{port}", COURSE_HUB_SUBDOMAIN_HOST=f"http://hub.test:{port}")
    log = top / "hub.log"
    # what `python -m hub run` does before it starts the hub; the config file only reads
    run([sys.executable, "-m", "hub", "prepare"], env=env, cwd=course)
    with open(log, "w") as out:
        # the hub runs from the instructors' copy (it refuses a checkout others may enter)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterhub",
                "-f",
                str(course / "hub" / "jupyterhub_config.py"),
                f"--JupyterHub.hub_port={hub_port}",
                f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api_port}",
            ],
            cwd=top,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(f"http://127.0.0.1:{port}/hub/api/", proc, log)
        yield Hub(url=f"http://hub.test:{port}", passwords=passwords, home=users, course=course, log=log)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the hub stops the users' servers, then itself
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log, ARTIFACTS / "hub.log")
        if (course / "autograded").exists():  # what the grading wrote, for a failure's reader
            shutil.copytree(course / "autograded", ARTIFACTS / "autograded", dirs_exist_ok=True)
        for name in users:
            remove_user(name)
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(hub):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--host-resolver-rules=MAP hub.test 127.0.0.1, MAP *.hub.test 127.0.0.1"],
        )
        yield b
        b.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def settle_dialogs(page) -> list[str]:
    """Answer the dialogs JupyterLab put over the page, and say which they were. Under CI's load a
    notebook can open before the kernel specs or the server answer: JupyterLab then asks which
    kernel to start, or says it lost the server; the default answer (the notebook's own kernel,
    or "Dismiss") is the student's. One CI run clicked on such a dialog for 3 minutes."""
    seen = []
    dialog = page.locator(".jp-Dialog")
    for _ in range(5):
        if not dialog.count() or not dialog.first.is_visible():
            break
        text = " | ".join(dialog.first.inner_text().split("\n"))
        seen.append(text)
        shot(page, f"dialog-{len(seen)}")
        print(f"JupyterLab dialog answered with its default button: {text}")
        dialog.first.locator(".jp-Dialog-footer .jp-mod-accept").last.click(timeout=30_000)
        try:
            dialog.first.wait_for(state="detached", timeout=30_000)
        except Exception:
            pass  # a second dialog of the same kind: answered on the next turn
    return seen


def run_all_cells(page) -> None:
    """Run > Run All Cells in the menu bar (the kernel was just started: no restart).
    JupyterLab marks a cell [*] the moment it sends it to the kernel, however busy the kernel is;
    a command lost while the page settles under CI's load (the kernel idle, every prompt still
    [ ] ten minutes later, as a screenshot showed once) is given again, after any dialog is answered.
    So is a run whose queue the kernel dropped: a dialog answered just before (JupyterLab's
    "Select Kernel" starts a new kernel) can replace the kernel under the queued cells, and their
    [*] marks go back to [ ] with none run (CI, once: the new kernel idle for ten minutes)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    prompts = page.locator(".jp-InputPrompt")
    queued, ran = (prompts.filter(has_text=re.compile(pattern)) for pattern in (r"\[\*\]", r"\[\d+\]"))
    dialogs = []
    for attempt in range(1, 4):
        dialogs += settle_dialogs(page)
        try:
            page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click(timeout=60_000)
            page.get_by_role("menuitem", name="Run All Cells", exact=True).click(timeout=60_000)
            prompts.filter(has_text=re.compile(r"\[(\*|\d+)\]")).first.wait_for(state="attached", timeout=60_000)
        except PlaywrightTimeout:
            shot(page, f"run-all-not-started-{attempt}")
            if not page.locator(".jp-Dialog").count():
                page.keyboard.press("Escape")  # a menu left open (a dialog is answered on the next turn)
            continue
        # started: done once a cell has run; lost if the queue empties with none run
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if ran.count():
                return
            if not queued.count():
                break
            time.sleep(0.5)
        else:
            return  # still queued after ten minutes: the caller's wait for results says what is wrong
        shot(page, f"run-all-dropped-{attempt}")
    raise AssertionError(
        "Run > Run All Cells ran no cell, three times in a row (screenshots in "
        f"build/test-artifacts/hub); dialogs answered: {dialogs or 'none'}"
    )


def log_in(browser, hub: Hub, user: str):
    """A browser session of `user`: logged in, their server started, JupyterLab open."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    # deadlines, not waits: CI runs this next to lab 9's Spark gradings, where a page or a kernel's
    # restart can take minutes; a working hub meets them in seconds
    page.set_default_timeout(180_000)
    page.goto(f"{hub.url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", hub.passwords[user])
    page.click("#login_submit")
    page.wait_for_url(re.compile(rf"/user/{user}/lab"), timeout=180_000)
    page.locator(".jp-LabShell").wait_for(timeout=120_000)
    return page


def nbgrader_panel(page, item: str) -> None:
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.get_by_role("menuitem", name=item).click()


def formgrader(page):
    """The formgrader panel's frame (the frame JupyterHub forbids unless the hub is set up for it)."""
    nbgrader_panel(page, "Formgrader")
    frame = page.frame_locator("iframe[src*='formgrader']")
    frame.get_by_text("Manage Assignments").first.wait_for()
    return frame


def close_modal(frame) -> str:
    """Dismiss formgrader's report of an action; return its text."""
    modal = frame.locator(".modal-dialog").first
    modal.wait_for(timeout=300_000)
    text = modal.inner_text()
    modal.get_by_role("button", name=re.compile("close|ok", re.I)).first.click()
    modal.wait_for(state="hidden")
    return text


@pytest.fixture
def on_failure(browser, request):
    """Screenshots of every page still open when the test fails: what the users saw."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        for i, context in enumerate(browser.contexts):
            for j, page in enumerate(context.pages):
                try:
                    shot(page, f"failed-{i}-{j}")
                except Exception:  # the page itself may be what broke
                    pass


@pytest.mark.timeout(1800)
def test_a_student_and_an_instructor_do_lab1_in_the_browser(hub, browser, on_failure):
    # the instructor generates the student version of lab 1 and releases it, in the formgrader
    teacher = log_in(browser, hub, INSTRUCTOR)
    frame = formgrader(teacher)
    row = frame.locator("tr", has=frame.get_by_role("link", name=LAB, exact=True))
    row.locator("td.assign a").click()
    assert "Success" in close_modal(frame)
    row.locator("td.release a").click()
    assert "Success" in close_modal(frame)
    row.locator("td.status", has_text="released").wait_for()
    shot(teacher, "1-instructor-released")

    # the student fetches it, does the work, and runs every cell
    student = log_in(browser, hub, STUDENT)
    nbgrader_panel(student, "Assignment List")
    student.get_by_role("button", name="Fetch").click()
    fetched = hub.home[STUDENT] / LAB / f"{LAB}.ipynb"
    deadline = time.monotonic() + 60
    while not fetched.exists():
        assert time.monotonic() < deadline, f"the Fetch button did not fetch {LAB} into the student's home"
        time.sleep(0.2)
    student.get_by_text(re.compile("Downloaded assignments", re.I)).first.wait_for()
    shot(student, "2-student-fetched")
    assert "### BEGIN SOLUTION" not in fetched.read_text(), "the release holds no solution"
    # the student's answers (the solution's code, as if typed), in their own file
    solution = nbformat.read(SOLUTIONS / LAB / f"{LAB}.ipynb", as_version=4)
    # ... and a note meant to run a script where the instructor reads it (the formgrader)
    solution.cells.append(nbformat.v4.new_markdown_cell(XSS))
    for cell in solution.cells:  # no output yet: every "passed" line below comes from this run
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nbformat.write(solution, fetched)
    owner = pwd.getpwnam(STUDENT)
    os.chown(fetched, owner.pw_uid, owner.pw_gid)

    student.goto(f"{hub.server(STUDENT)}/lab/tree/{LAB}/{LAB}.ipynb")
    student.locator(".jp-Notebook").wait_for()
    student.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=120_000)
    # a dialog over the notebook, as CI's load once left one (JupyterLab asking which kernel to
    # start): the run below answers it as a student would, with the notebook's own kernel
    student.locator(".lm-MenuBar-item", has_text=re.compile(r"^Kernel$")).click()
    student.get_by_role("menuitem", name=re.compile(r"^Change Kernel")).click()
    student.locator(".jp-Dialog").wait_for()
    run_all_cells(student)
    # the notebook was written without outputs, so each line below can only come from this run
    parts = graded_parts(solution)
    for label in parts:
        passed = student.get_by_text(re.compile(rf"{label} passed \(")).first
        passed.wait_for(state="attached", timeout=600_000)
        passed.scroll_into_view_if_needed()
    student.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=300_000)
    errors = student.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    shot(student, "3-student-ran-lab1")
    assert "Traceback" not in " ".join(errors.all_text_contents())
    student.keyboard.press("Control+s")
    student.locator(".jp-mod-dirty").wait_for(state="detached")
    # every self-check's line is in what the student's server saved
    saved = json.dumps(nbformat.read(fetched, as_version=4).cells)
    assert all(f"{label} passed" in saved for label in parts), saved[-2000:]

    nbgrader_panel(student, "Assignment List")
    student.get_by_role("button", name="Submit").click()
    student.get_by_text(re.compile("submitted", re.I)).first.wait_for()
    shot(student, "4-student-submitted")

    # the instructor collects and autogrades (the course's sandboxed grading) and sees the score
    frame = formgrader(teacher)
    row = frame.locator("tr", has=frame.get_by_role("link", name=LAB, exact=True))
    row.locator("td.collect a").click()
    assert "Success" in close_modal(frame)
    row.locator("td.num-submissions a").click()
    sub = frame.locator("tr", has_text=STUDENT)
    sub.locator("td.autograde a").click()
    assert "Successfully autograded" in close_modal(frame)
    score = sub.locator("td.score")
    score.filter(has_text="/").wait_for(timeout=600_000)
    shot(teacher, "5-instructor-autograded")
    assert score.inner_text().strip() == f"{sum(parts.values()):g} / {sum(parts.values()):g}"

    # the instructor reads the submission in the formgrader: the student's markup runs no script
    # (Manual Grading -> lab1 -> the notebook -> the submission, in the panel's frame)
    page = next(f for f in teacher.frames if "/formgrader" in f.url)
    page.goto(f"{hub.server(INSTRUCTOR)}/formgrader/gradebook/{LAB}/{LAB}")
    page.locator("a[href*='/formgrader/submissions/']").first.click()
    page.wait_for_url(re.compile("/formgrader/submissions/"))
    page.wait_for_selector("text=/lab1-q6/")
    shot(teacher, "6-instructor-reads-the-submission")
    assert page.evaluate("() => window.top.pwned === undefined && window.pwned === undefined")


def test_a_student_has_none_of_the_instructors_powers(hub, browser, on_failure):
    student = log_in(browser, hub, STUDENT)
    student.get_by_role("menuitem", name="Nbgrader").click()
    items = student.locator(".lm-Menu-itemLabel").all_inner_texts()
    student.keyboard.press("Escape")
    assert "Assignment List" in items and "Formgrader" not in items and "Create assignment" not in items, items
    # (page.goto, not Playwright's own HTTP client: only the browser maps *.hub.test to this machine)
    assert student.goto(f"{hub.server(STUDENT)}/formgrader").status == 404
    # JupyterHub's own rule stands for students: no page may frame their server
    lab = student.goto(f"{hub.server(STUDENT)}/lab")
    assert lab.headers["content-security-policy"] == "frame-ancestors 'none'"
    teacher = log_in(browser, hub, INSTRUCTOR)
    assert teacher.goto(f"{hub.server(INSTRUCTOR)}/lab").headers["content-security-policy"] == "frame-ancestors 'self'"
    # the formgrader as a page of its own, as instructors use it on a hub without subdomains
    teacher.goto(f"{hub.server(INSTRUCTOR)}/formgrader")
    teacher.get_by_text("Manage Assignments").first.wait_for()
    # the instructors' course folder (the solutions) is closed to the student's own user
    solution = hub.course / "solutions" / LAB / f"{LAB}.ipynb"
    peek = subprocess.run(["runuser", "-u", STUDENT, "--", "cat", str(solution)], capture_output=True, text=True)
    assert peek.returncode != 0 and "Permission denied" in peek.stderr


def test_memory_per_user(hub):
    """Not a limit, a measurement for the README: what each user's server and kernels hold."""
    import psutil

    lines = []
    for user in (STUDENT, INSTRUCTOR):
        procs = [p for p in psutil.process_iter(["username", "memory_info", "name"]) if p.info["username"] == user]
        rss = sum(p.info["memory_info"].rss for p in procs if p.info["memory_info"])
        lines.append(f"{user}: {len(procs)} processes, {rss / 2**20:.0f} MB resident")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "memory.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    assert lines
