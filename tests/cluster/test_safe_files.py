"""The grader's one reader and writer of student-writable folders: a link at any component is
refused (and what it points to is left as it was), so are pipes, devices and files over the
limit; ordinary files are read and written as usual."""

from __future__ import annotations

import os

import pytest

from cluster.safe_files import RefusedPath, kind, list_dir, make_dirs, read_bytes, read_chunk, read_text, write_text


@pytest.fixture
def secret(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("the grader's secret\n")
    return outside / "secret"


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


def test_ordinary_files_are_read_written_and_appended(folder):
    write_text(folder, "a/b/out.txt", "one\n", create_dirs=True)
    write_text(folder, "a/b/out.txt", "two\n", append=True)
    assert read_text(folder, "a/b/out.txt") == "one\ntwo\n"
    assert oct(os.stat(folder / "a/b/out.txt").st_mode & 0o777) == "0o600"
    assert read_bytes(folder, "missing") is None
    assert list_dir(folder, "a/b") == ["out.txt"]
    assert kind(folder, "a") == "folder" and kind(folder, "a/b/out.txt") == "file" and kind(folder, "x") is None


def test_a_link_at_the_file_is_neither_read_nor_written_through(folder, secret):
    (folder / "result.txt").symlink_to(secret)
    with pytest.raises(RefusedPath, match="link"):
        read_text(folder, "result.txt")
    with pytest.raises(RefusedPath, match="link"):
        write_text(folder, "result.txt", "the grader's settings")
    assert secret.read_text() == "the grader's secret\n"
    assert kind(folder, "result.txt") == "link"


def test_a_link_at_a_folder_on_the_way_is_refused(folder, secret):
    (folder / "worker").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(RefusedPath, match="link"):
        read_text(folder, "worker/secret")
    with pytest.raises(RefusedPath, match="link"):
        write_text(folder, "worker/new.properties", "password=x")
    with pytest.raises(RefusedPath, match="link"):
        make_dirs(folder, "worker/plugins")
    assert sorted(os.listdir(secret.parent)) == ["secret"]


def test_pipes_large_files_and_paths_out_of_the_folder_are_refused(folder):
    os.mkfifo(folder / "pipe")
    with pytest.raises(RefusedPath, match="not an ordinary file"):
        read_text(folder, "pipe")  # returns at once: a FIFO never blocks the grader
    with pytest.raises(RefusedPath, match="pipe|not an ordinary"):
        write_text(folder, "pipe", "x")
    (folder / "big").write_bytes(b"x" * 5000)
    with pytest.raises(RefusedPath, match="5,000 bytes"):
        read_bytes(folder, "big", limit=4096)
    for path in ("../outside", "/etc/passwd"):
        with pytest.raises(RefusedPath, match="inside the folder"):
            read_text(folder, path)


def test_a_growing_log_is_read_in_steps_and_a_link_is_not(folder, secret):
    write_text(folder, "job.log", "acked 1\n")
    first = read_chunk(folder, "job.log", 0)
    write_text(folder, "job.log", "acked 2\n", append=True)
    assert first == b"acked 1\n" and read_chunk(folder, "job.log", len(first)) == b"acked 2\n"
    assert read_chunk(folder, "job.log", 3, max_bytes=4) == b"ed 1"
    assert read_chunk(folder, "missing.log", 0) == b""
    (folder / "link.log").symlink_to(secret)
    with pytest.raises(RefusedPath, match="link"):
        read_chunk(folder, "link.log", 0)
