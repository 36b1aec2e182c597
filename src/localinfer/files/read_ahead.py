"""A model file read from disk ahead of the loader that copies it.

A repacked matrix is copied out of the mapping at load, and on a cold page cache that copy's page
faults read the file a few hundred KiB at a time, with the CPU waiting on the disk between them;
copying is then added to reading instead of overlapping it. `ReadAhead` keeps the disk busy
instead: a thread asks the OS (POSIX_FADV_WILLNEED) for the file's bytes up to `window` past the
loader's position, a chunk at a time, while the loader's threads copy what has arrived. The window
bounds the page cache taken ahead of use. On a warm page cache the asks find the pages there and
cost microseconds. Where the OS has no posix_fadvise, nothing is read ahead."""
from __future__ import annotations

import os
import threading

WINDOW = 512 << 20   # bytes read ahead of the loader, at most
CHUNK = 1 << 20      # bytes per ask: Linux reads at most the device's readahead size (read_ahead_kb,
                     # 128 KiB to a few MiB) of each ask, so a larger one would be read only in part


class ReadAhead:
    def __init__(self, path: str, start: int, end: int, window: int = WINDOW, chunk: int = CHUNK):
        """Bytes [start, end) of `path`, read ahead from `start` on."""
        if window <= 0 or chunk <= 0:
            raise ValueError(f"window and chunk must be positive, got {window} and {chunk}")
        self._end, self._window, self._chunk = end, window, chunk
        self._position = self._issued = start
        self._closed = False
        self._changed = threading.Condition()
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._thread = threading.Thread(target=self._run, name="localinfer-read-ahead", daemon=True)
        self._thread.start()

    @property
    def issued(self) -> int:
        """The file offset up to which the OS has been asked for the bytes."""
        return self._issued

    def at(self, offset: int) -> None:
        """The loader reads from `offset` now: the window moves on (never back)."""
        with self._changed:
            if offset > self._position:
                self._position = offset
                self._changed.notify_all()

    def _window_asked(self) -> bool:
        """Every byte of the window has been asked for (call holding the lock)."""
        return self._issued >= min(self._end, self._position + self._window)

    def _next(self) -> tuple[int, int] | None:
        """The next range to ask for, once there is one in the window; None once closed."""
        with self._changed:
            while not self._closed and self._window_asked():
                self._changed.wait()
            if self._closed:
                return None
            lo = max(self._issued, self._position)
            hi = min(self._end, self._position + self._window, lo + self._chunk)
            self._issued = hi
            self._changed.notify_all()   # caught_up
            return lo, hi

    def caught_up(self, timeout: float | None = None) -> bool:
        """Waits until the whole window has been asked for (or this is closed); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._closed or self._window_asked(), timeout)

    def _run(self) -> None:
        try:
            while (span := self._next()) is not None:
                lo, hi = span
                if hi > lo:
                    os.posix_fadvise(self._fd, lo, hi - lo, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass   # only a hint: the loader's own reads still get the bytes
        finally:
            os.close(self._fd)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()

    def __enter__(self) -> "ReadAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_ahead(path: str, start: int, end: int) -> ReadAhead | None:
    """A ReadAhead over bytes [start, end) of `path`, or None where the OS cannot be asked."""
    if not hasattr(os, "posix_fadvise") or end <= start:
        return None
    return ReadAhead(path, start, end)
