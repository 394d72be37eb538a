"""The course's JupyterHub, its parts: who may log in and as what, what each role's server reads,
and the Kafka login each user's server gets on the shared cluster (real brokers). The whole hub,
in a real browser, is tests/hub/test_hub_browser.py."""

from __future__ import annotations

import logging
import os
import pwd
import stat

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from hub import course_hub
from hub.course_hub import INSTRUCTOR, STUDENT, HubError


def test_the_roster_and_the_instructors_say_who_is_who(tmp_path, monkeypatch):
    roster = tmp_path / "students.txt"
    roster.write_text("# section A\nada\nbo  # late joiner\n\n")
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(roster))
    monkeypatch.setenv("COURSE_HUB_INSTRUCTORS", "prof, ta1")
    assert course_hub.roles() == {"ada": STUDENT, "bo": STUDENT, "prof": INSTRUCTOR, "ta1": INSTRUCTOR}


def test_a_hub_without_a_roster_or_an_instructor_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(tmp_path / "nowhere.txt"))
    with pytest.raises(HubError, match="(?s)COURSE_HUB_STUDENTS=.* is not a file.*What to do: Write"):
        course_hub.roles()
    (tmp_path / "students.txt").write_text("ada\n")
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(tmp_path / "students.txt"))
    monkeypatch.delenv("COURSE_HUB_INSTRUCTORS", raising=False)
    with pytest.raises(HubError, match="no instructor"):
        course_hub.roles()


def test_students_get_the_assignments_panel_and_not_the_instructors_parts(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HUB_EXCHANGE", str(tmp_path / "exchange"))
    for subdomains in (False, True):
        student = course_hub.jupyter_config(STUDENT, subdomains)
        hidden = student["labconfig/page_config.json"]["disabledExtensions"]
        assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"} <= set(hidden)
        assert "@jupyter/nbgrader:assignment-list" not in hidden  # fetch and submit
        server = student["jupyter_server_config.json"]["ServerApp"]
        assert server["jpserver_extensions"]["nbgrader.server_extensions.formgrader"] is False
        assert student["jupyter_server_config.json"]["KernelManager"] == {"transport": "ipc"}  # not TCP ports
        # a student's server keeps JupyterHub's own rule: no page may frame it
        assert "tornado_settings" not in server
        assert student["nbgrader_config.json"] == {
            "CourseDirectory": {"course_id": "kafka-course"},
            "Exchange": {"root": str(tmp_path / "exchange")},
        }


def test_the_instructors_server_allows_frames_from_itself_only_on_subdomains(monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_HUB_EXCHANGE", str(tmp_path / "exchange"))
    on_paths = course_hub.jupyter_config(INSTRUCTOR, subdomains=False)
    assert "tornado_settings" not in on_paths["jupyter_server_config.json"]["ServerApp"]
    assert "@jupyter/nbgrader:formgrader" not in on_paths["labconfig/page_config.json"]["disabledExtensions"]
    on_subdomains = course_hub.jupyter_config(INSTRUCTOR, subdomains=True)
    headers = on_subdomains["jupyter_server_config.json"]["ServerApp"]["tornado_settings"]["headers"]
    assert headers == {"Content-Security-Policy": "frame-ancestors 'self'"}


def test_the_config_folders_are_readable_by_every_user(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HUB_STATE", str(tmp_path / "state"))
    folders = course_hub.write_jupyter_configs(subdomains=True)
    assert set(folders) == {STUDENT, INSTRUCTOR} and folders == course_hub.jupyter_config_folders()
    for folder in folders.values():
        assert (folder / "labconfig" / "page_config.json").stat().st_mode & 0o004
        assert folder.stat().st_mode & 0o005 == 0o005


def test_the_config_file_refuses_a_hub_that_was_not_prepared(tmp_path, monkeypatch):
    """jupyterhub_config.py only reads what `python -m hub prepare` made; without it, or with
    other settings since, it says to run that (no folder made, no file written)."""
    monkeypatch.setenv("COURSE_HUB_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("COURSE_HUB_EXCHANGE", str(tmp_path / "exchange"))
    monkeypatch.delenv("COURSE_HUB_SUBDOMAIN_HOST", raising=False)
    with pytest.raises(course_hub.HubError, match="python -m hub prepare"):
        course_hub.prepared()
    assert not (tmp_path / "state").exists()
    course_hub.write_jupyter_configs(subdomains=False)
    course_hub.private_dir().mkdir()
    with pytest.raises(course_hub.HubError, match="runtime missing"):  # the users' runtime folders
        course_hub.prepared()
    course_hub.make_runtime_root()
    assert course_hub.prepared() == course_hub.jupyter_config_folders()
    monkeypatch.setenv("COURSE_HUB_SUBDOMAIN_HOST", "http://hub.test:8000")  # changed since
    with pytest.raises(course_hub.HubError, match="prepared with other settings"):
        course_hub.prepared()
    monkeypatch.delenv("COURSE_HUB_SUBDOMAIN_HOST")
    # prepared by an older hub, whose users' kernels listened on TCP: prepare again
    server = course_hub.jupyter_config_folders()[STUDENT] / "jupyter_server_config.json"
    server.write_text(server.read_text().replace('"ipc"', '"tcp"'))
    with pytest.raises(course_hub.HubError, match="older version of the hub"):
        course_hub.prepared()


def create_topic(env: dict, topic: str) -> None:
    """Make a topic (and delete it again) with the login a server's environment holds."""
    with KafkaAdminClient(
        bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username=env["KAFKA_USERNAME"],
        sasl_plain_password=env["KAFKA_PASSWORD"],
        bootstrap_timeout_ms=10_000,
        request_timeout_ms=10_000,
    ) as admin:
        admin.create_topics([NewTopic(topic, 1, 3)])
        admin.delete_topics([topic])


def test_each_server_gets_a_kafka_login_for_its_namespace_only(cluster):
    first = course_hub.kafka_login("hubtest-ada")
    assert first["COURSE_MODE"] == "hosted" and first["LAB_NAMESPACE"] == first["KAFKA_USERNAME"] == "hubtest-ada"
    assert first["KAFKA_BOOTSTRAP_SERVERS"] == cluster.bootstrap_servers
    create_topic(first, "hubtest-ada.events")
    with pytest.raises(TopicAuthorizationFailedError):
        create_topic(first, "hubtest-bo.events")  # another student's namespace
    # the next start of the server resets the password: the old one no longer logs in
    second = course_hub.kafka_login("hubtest-ada")
    assert second["KAFKA_PASSWORD"] != first["KAFKA_PASSWORD"]
    create_topic(second, "hubtest-ada.events")
    with pytest.raises(KafkaError):  # kafka-python reports it as a failed bootstrap
        create_topic(first, "hubtest-ada.events")
    create_topic(second, "hubtest-ada.events")  # the cluster itself works: the old password was refused


def test_a_stopped_servers_login_is_revoked_and_the_next_start_makes_a_new_one(cluster):
    import asyncio
    from types import SimpleNamespace

    login = course_hub.kafka_login("hubtest-cy")
    create_topic(login, "hubtest-cy.events")
    spawner = SimpleNamespace(user=SimpleNamespace(name="hubtest-cy"), log=logging.getLogger("test-hub"))
    asyncio.run(course_hub.post_stop_hook()(spawner))  # as JupyterHub calls it when the server stops
    with pytest.raises(KafkaError):
        create_topic(login, "hubtest-cy.events")
    create_topic(course_hub.kafka_login("hubtest-cy"), "hubtest-cy.events")  # the next start works


def test_an_instructors_server_gets_the_course_folder_and_the_admin_login(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_HUB_COURSE", str(tmp_path / "course"))
    configs = {STUDENT: tmp_path / "s", INSTRUCTOR: tmp_path / "i"}
    # (users of every Debian machine: a server's user exists)
    student = course_hub.server_environment("daemon", STUDENT, configs)
    assert "KAFKA_ADMIN_PASSWORD" not in student and "PYTHONPATH" not in student
    assert student["JUPYTER_CONFIG_PATH"] == str(tmp_path / "s")
    assert student["COURSE_OWN_CLUSTER_HOME"].startswith(pwd.getpwnam("daemon").pw_dir)  # lab 7's, theirs
    teacher = course_hub.server_environment("nobody", INSTRUCTOR, configs)
    assert teacher["PYTHONPATH"] == str(tmp_path / "course")
    assert teacher["JUPYTER_CONFIG_PATH"] == f"{tmp_path / 'i'}:{tmp_path / 'course'}"
    assert teacher["KAFKA_ADMIN_PASSWORD"] == cluster.secrets.admin().password


@pytest.mark.parametrize("name", ["admin", "broker", "grade-lab1-0a1b2c3d", "J.Smith"])
def test_a_login_that_would_be_a_course_user_or_no_namespace_is_refused(tmp_path, monkeypatch, name):
    (tmp_path / "students.txt").write_text("ada\n")
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(tmp_path / "students.txt"))
    monkeypatch.setenv("COURSE_HUB_INSTRUCTORS", f"prof,{name}")
    with pytest.raises(HubError, match="cannot be a login here"):
        course_hub.roles()


def test_the_hubs_admin_must_be_an_instructor(tmp_path, monkeypatch):
    (tmp_path / "students.txt").write_text("ada\n")
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(tmp_path / "students.txt"))
    monkeypatch.setenv("COURSE_HUB_INSTRUCTORS", "prof")
    monkeypatch.setenv("COURSE_HUB_ADMIN", "ada")
    with pytest.raises(HubError, match="may act as any user"):
        course_hub.roles()
    monkeypatch.setenv("COURSE_HUB_ADMIN", "prof")
    assert course_hub.roles()["prof"] == INSTRUCTOR


@pytest.mark.skipif(os.geteuid() != 0, reason="gives folders to other users: run as root")
def test_the_exchange_is_made_before_any_student_can_claim_it(tmp_path, monkeypatch):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    daemon = pwd.getpwnam("daemon")
    os.chown(course, daemon.pw_uid, daemon.pw_gid)  # the instructor who owns the course
    monkeypatch.setenv("COURSE_HUB_COURSE", str(course))
    monkeypatch.setenv("COURSE_HUB_EXCHANGE", str(exchange))
    course_hub.prepare_exchange()
    assert (exchange.stat().st_uid, stat.S_IMODE(exchange.stat().st_mode)) == (0, 0o1777)  # nbgrader's demand, sticky
    inbound = (exchange / "kafka-course" / "inbound").stat()
    assert (inbound.st_uid, stat.S_IMODE(inbound.st_mode)) == (daemon.pw_uid, 0o3733)  # write-only, sticky
    # a course folder someone else made first is not taken over
    os.chown(exchange / "kafka-course" / "outbound", 0, 0)
    with pytest.raises(HubError, match="outbound is not a folder of the course's owner"):
        course_hub.prepare_exchange()


def roster_of(tmp_path, monkeypatch, students: int) -> None:
    roster = tmp_path / "students.txt"
    roster.write_text("".join(f"student-{i}\n" for i in range(students)))
    monkeypatch.setenv("COURSE_HUB_STUDENTS", str(roster))
    monkeypatch.setenv("COURSE_HUB_INSTRUCTORS", "prof")


def test_the_shared_clusters_heap_grows_with_the_roster(tmp_path, monkeypatch):
    from cluster import capacity

    monkeypatch.delenv("COURSE_BROKER_HEAP", raising=False)
    roster_of(tmp_path, monkeypatch, 30)
    assert "30 students hold up to" in course_hub.size_cluster()
    assert os.environ["COURSE_BROKER_HEAP"] == "256m"
    monkeypatch.delenv("COURSE_BROKER_HEAP")
    roster_of(tmp_path, monkeypatch, capacity.max_students() + 1)
    with pytest.raises(HubError):  # the kit's 2-core figure
        course_hub.size_cluster()
    monkeypatch.setenv("COURSE_MAX_PARTITIONS", "6000")  # a hub machine measured to hold more
    roster_of(tmp_path, monkeypatch, capacity.max_students())
    assert capacity.max_students() > 56
    course_hub.size_cluster()
    assert int(os.environ["COURSE_BROKER_HEAP"].removesuffix("m")) > 256
    monkeypatch.setenv("COURSE_BROKER_HEAP", "1g")  # the admin's choice is kept
    assert course_hub.size_cluster().endswith("each broker's heap: 1g.")


def test_a_roster_one_cluster_cannot_hold_is_refused_with_the_numbers(tmp_path, monkeypatch):
    from cluster import capacity

    roster_of(tmp_path, monkeypatch, capacity.max_students() + 1)
    with pytest.raises(HubError) as e:
        course_hub.size_cluster()
    text = str(e.value)
    assert f"{capacity.max_students() + 1} students hold up to" in text and f"{capacity.max_partitions():,}" in text
    assert f"up to {capacity.max_students():,} students" in text and "python -m cluster k8s" in text
