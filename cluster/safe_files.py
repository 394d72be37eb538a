"""The one way the grader reads and writes files in a folder that student code can write.

A submission can leave anything in its working folder before the grader looks: a link to the
grader's secrets where a result file should be, a link where the grader will write, a FIFO
that blocks whoever opens it, a file of gigabytes. Every path here is taken relative to a
folder the caller trusts (`root`, made by the grader) and walked one component at a time with
O_NOFOLLOW, so a link at ANY component (a file, or a folder on the way) is refused instead of
followed. Only regular files are read or written, never more than a stated size, and nothing
blocks on a pipe or a device.

    from cluster.safe_files import read_bytes, write_bytes, make_dirs
    text = read_bytes(workdir, "checkpoint.json", limit=2**20)      # None if it does not exist
    write_bytes(private, "worker/worker.properties", data, mode=0o600)

Errors are `RefusedPath` (an OSError): what was refused and why, in words a student can act on.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

DEFAULT_LIMIT = 16 * 2**20  # bytes read from one file unless the caller says otherwise
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RefusedPath(OSError):
    """A path the grader will not follow: a link, not a regular file or folder, too large."""

    def __init__(self, path: str | Path, why: str):
        super().__init__(errno.EPERM, why, str(path))
        self.path, self.why = str(path), why

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _parts(relative: str | Path) -> list[str]:
    parts = [p for p in Path(relative).parts if p not in ("", ".")]
    if Path(relative).is_absolute() or ".." in parts:
        raise RefusedPath(relative, "only a path inside the folder is allowed (no '..', not absolute)")
    return parts


def _open_dir(root: Path, parts: list[str], create: bool = False, mode: int = 0o700) -> int:
    """A descriptor of root/parts..., every step opened without following a link."""
    try:
        fd = os.open(root, _DIR)
    except OSError as e:
        raise _refused(root, e) from None
    try:
        for i, name in enumerate(parts):
            try:
                nxt = os.open(name, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:  # made meanwhile: opened below, and checked like any other
                    pass
                nxt = os.open(name, _DIR, dir_fd=fd)
            except OSError as e:
                raise _refused(Path(root, *parts[: i + 1]), e) from None
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def _refused(path: Path, e: OSError) -> OSError:
    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        return RefusedPath(path, "is a link or not a folder; links are not followed")
    return e


def _open_file(root: Path, relative: str | Path, flags: int, mode: int = 0o600, create_dirs: bool = False) -> int:
    parts = _parts(relative)
    if not parts:
        raise RefusedPath(root, "names a folder, not a file")
    folder = _open_dir(Path(root), parts[:-1], create=create_dirs)
    try:
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, mode, dir_fd=folder)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RefusedPath(Path(root, relative), "is a link; links are not followed") from None
        if e.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise RefusedPath(Path(root, relative), "is a pipe, not an ordinary file") from None
        raise
    finally:
        os.close(folder)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise RefusedPath(Path(root, relative), "is not an ordinary file (a pipe, a device or a folder)")
    os.set_blocking(fd, True)
    return fd


def read_bytes(root: str | Path, relative: str | Path, limit: int = DEFAULT_LIMIT) -> bytes | None:
    """The file's bytes, or None if it does not exist. RefusedPath for a link anywhere on the
    way, anything but a regular file, or a file larger than `limit` bytes."""
    try:
        fd = _open_file(Path(root), relative, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise RefusedPath(Path(root, relative), f"is {size:,} bytes, more than the {limit:,} read")
        data = f.read(limit + 1)
    if len(data) > limit:  # grew while we read
        raise RefusedPath(Path(root, relative), f"is more than the {limit:,} bytes read")
    return data


def read_text(root: str | Path, relative: str | Path, limit: int = DEFAULT_LIMIT) -> str | None:
    data = read_bytes(root, relative, limit)
    return None if data is None else data.decode(errors="replace")


def tail_text(root: str | Path, relative: str | Path, max_bytes: int = 200_000) -> str:
    """The last max_bytes of a file (a log), "" if it does not exist; links refused as above."""
    try:
        fd = _open_file(Path(root), relative, os.O_RDONLY)
    except FileNotFoundError:
        return ""
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(0, size - max_bytes))
        return f.read(max_bytes).decode(errors="replace")


def read_chunk(root: str | Path, relative: str | Path, offset: int, max_bytes: int = 2**20) -> bytes:
    """Up to max_bytes of a file (a log that grows) from byte `offset`, b"" if it does not exist
    or has nothing past it; links refused as above. Read a log whole, in steps, without reading
    again what was read."""
    try:
        fd = _open_file(Path(root), relative, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as f:
        f.seek(offset)
        return f.read(max_bytes)


def write_bytes(
    root: str | Path,
    relative: str | Path,
    data: bytes,
    mode: int = 0o600,
    append: bool = False,
    create_dirs: bool = False,
) -> None:
    """Write (or append to) a regular file; never through a link; its mode set to `mode`."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = _open_file(Path(root), relative, flags, mode, create_dirs=create_dirs)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), mode)  # a file that existed keeps its old mode otherwise
        f.write(data)


def write_text(
    root: str | Path,
    relative: str | Path,
    text: str,
    mode: int = 0o600,
    append: bool = False,
    create_dirs: bool = False,
) -> None:
    write_bytes(root, relative, text.encode(), mode, append, create_dirs)


def make_dirs(root: str | Path, relative: str | Path, mode: int = 0o700, exclusive: bool = False) -> Path:
    """root/relative as a folder, made where missing; a link on the way is refused.
    exclusive: FileExistsError if the last folder was there already (made by someone else)."""
    parts = _parts(relative)
    if exclusive and parts:
        parent = _open_dir(Path(root), parts[:-1], create=True, mode=mode)
        try:
            os.mkdir(parts[-1], mode, dir_fd=parent)
        finally:
            os.close(parent)
        return Path(root, relative)
    os.close(_open_dir(Path(root), parts, create=True, mode=mode))
    return Path(root, relative)


def remove(root: str | Path, relative: str | Path) -> None:
    """Delete what is at root/relative: a file, a link (not what it points to) or a whole
    folder (never following a link inside it); nothing if it is not there."""
    import shutil

    parts = _parts(relative)
    if not parts:
        raise RefusedPath(root, "is the folder itself")
    try:
        parent = _open_dir(Path(root), parts[:-1])
    except FileNotFoundError:
        return
    try:
        info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(parts[-1], dir_fd=parent)
        else:
            os.unlink(parts[-1], dir_fd=parent)
    except FileNotFoundError:
        pass
    finally:
        os.close(parent)


def give_folder(root: str | Path, relative: str | Path, uid: int) -> None:
    """Make uid the owner of the folder root/relative (a link on the way is refused: a process
    that can write in root may have put one in its place)."""
    fd = _open_dir(Path(root), _parts(relative))
    try:
        os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


def list_dir(root: str | Path, relative: str | Path = ".") -> list[str] | None:
    """The names in a folder (None if it does not exist); a link on the way is refused."""
    try:
        fd = _open_dir(Path(root), _parts(relative))
    except FileNotFoundError:
        return None
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def kind(root: str | Path, relative: str | Path) -> str | None:
    """ "file", "folder", "link" or "other" for what is at the path (not following it), or None."""
    parts = _parts(relative)
    try:
        folder = _open_dir(Path(root), parts[:-1])
    except FileNotFoundError:
        return None
    try:
        info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False) if parts else os.fstat(folder)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)
    return (
        "file"
        if stat.S_ISREG(info.st_mode)
        else "folder"
        if stat.S_ISDIR(info.st_mode)
        else "link"
        if stat.S_ISLNK(info.st_mode)
        else "other"
    )
