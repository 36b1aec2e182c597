"""Reading and writing files that must be regular files: saved KV state (--prompt-cache, a chat
session), the prefix cache's blocks, the model cache's checksum stamps.

A path that names a FIFO blocks `open()` until a writer comes, a device hands out endless or
empty bytes, and `os.replace` onto a device or FIFO swaps it for a regular file (as root, a
--prompt-cache of /dev/null would replace /dev/null). So a read opens without blocking and
checks what it opened (fstat) before reading a byte; a write first checks what it would replace.
Where the runtime chose the name itself (a block in its cache folder) a symlink is refused as
well: a file planted there must not lead the reader elsewhere.

Writes are atomic: a temporary file in the same folder is renamed over the target when complete,
so a crash leaves the old file or none, never half of one. The check before the rename and the
rename itself are two steps; a device put at the path between them is replaced, which only the
path's owner can do.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import BinaryIO, Iterator

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # (POSIX: where FIFOs block)
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


class NotRegularFileError(OSError):
    """The path names a FIFO, a device, a directory, a socket (or a symlink where none may be),
    not a regular file; the message names the path and what it is."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path, mode: int) -> NotRegularFileError:
    return NotRegularFileError(f"{os.fspath(path)} is {_kind(mode)}, not a regular file")


def open_regular(path: str | os.PathLike, follow_symlinks: bool = True) -> BinaryIO:
    """`path` opened for reading in binary, or NotRegularFileError when it is not a regular file.
    Never blocks in the open (a FIFO with no writer) and never opens a terminal as the
    controlling one. follow_symlinks=False refuses a symlink (O_NOFOLLOW)."""
    flags = os.O_RDONLY | _NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow_symlinks:
            raise NotRegularFileError(f"{os.fspath(path)} is a symbolic link, not a regular file") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(path, mode)
        # back to blocking reads: a regular file ignores the flag, but a reader need not know that
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_replaceable(path: str | os.PathLike) -> None:
    """Raises NotRegularFileError unless `path` is free, a regular file, or a symlink to a regular
    file or to nothing: what a write (atomic_write) may replace."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            mode = os.stat(path).st_mode
    except FileNotFoundError:  # nothing there, or a dangling link: the rename replaces only the link
        return
    if not stat.S_ISREG(mode):
        raise _refuse(path, mode)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, durable: bool = True, mode: int | None = None) -> Iterator[BinaryIO]:
    """`with atomic_write(path) as f: f.write(...)`: the bytes land at `path` only if the block
    completes, by renaming a temporary file of the same folder over it; `durable` fsyncs it first
    (a power cut leaves the old file or the new one). Refuses (NotRegularFileError, before writing
    anything) a path that names a FIFO, device, directory or socket, or a symlink to one. A
    symlink to a regular file is replaced by the file, not written through. `mode`: the new file's
    permissions (mkstemp's 0600, readable by its owner only, when None)."""
    import tempfile   # here, not at the top: it brings shutil and the compression modules into every start

    path = os.fspath(path)
    check_replaceable(path)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "wb") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def unlink_regular(path: str | os.PathLike) -> bool:
    """Deletes `path` if it is a regular file (not what a symlink points to, not a FIFO or device
    someone put there); True when it did."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
            return True
    except OSError:
        pass
    return False
