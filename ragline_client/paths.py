"""A source never yields what lies outside it: the one rule every connector and ``ragline
ingest`` apply to the paths they read (standard library only, so the connector kit has it).

The root (the folder an operator names) is trusted as given, a symlink included. Below it no
symbolic link is ever followed, to a file or to a folder, whether its target lies inside the
root or outside it: a target inside is yielded under its own path already (unless hidden or
excluded, which a link must not get around), and telling inside from outside would mean
resolving a path that can change between the check and the read. A relative path taken from
source data (a Git tree entry) must be plain: no absolute path, no ``..``, ``.`` or empty
segment. Whatever breaks the rule is skipped and reported, never read.

Reads check the rule on the file they open, not on a name looked at earlier: ``open_beneath``
opens the root, then every segment below it with ``O_NOFOLLOW`` relative to its parent's
descriptor (``openat``), so a folder swapped for a link after the walk fails the open instead
of leading it outside. A hard link cannot be told from the file it names and is out of reach of
any path rule; a share where untrusted users can hard-link the connector's files is not safe.
POSIX only (``dir_fd``, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import errno
import io
import os
import stat
from pathlib import Path, PurePosixPath


class OutsideRootError(OSError):
    """A path that would leave its root: a symbolic link below it, ``..``, an absolute path."""


def plain_parts(rel: str) -> tuple[str, ...]:
    """The segments of a relative POSIX path from source data, or ``OutsideRootError`` when
    it is absolute or holds a ``..``, ``.`` or empty segment, or a NUL."""
    if not rel or rel.startswith("/") or "\0" in rel:
        raise OutsideRootError(errno.EINVAL, "not a plain relative path", rel)
    parts = tuple(rel.split("/"))
    if any(p in ("", ".", "..") for p in parts):
        raise OutsideRootError(errno.EINVAL, "a '..', '.' or empty segment leaves or blurs the root", rel)
    return parts


def open_beneath(root: Path, rel: str) -> io.BufferedReader:
    """``root / rel`` opened for reading, following no symbolic link below ``root``: a link
    at any segment, a ``..``, or anything but a regular file raises ``OutsideRootError``.
    ``os.fstat`` of the returned file describes the very file that is read."""
    parts = plain_parts(rel)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            # O_NONBLOCK: a FIFO planted in the tree must not hang the read; fstat refuses it.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_NONBLOCK if last else os.O_DIRECTORY)
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                    raise OutsideRootError(errno.ELOOP, "a symbolic link is never followed", rel) from exc
                raise
            os.close(fd)
            fd = child
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutsideRootError(errno.EINVAL, "not a regular file", rel)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_unlinked(path: Path) -> io.BufferedReader:
    """An absolute path with no symbolic link anywhere in it (a path ``resolve()`` gave when
    the file was listed), opened so that a link put in since is refused, not followed."""
    if not path.is_absolute():
        raise OutsideRootError(errno.EINVAL, "not an absolute path", str(path))
    return open_beneath(Path(path.anchor), PurePosixPath(path).relative_to(path.anchor).as_posix())


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False
