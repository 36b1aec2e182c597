"""The `localinfer` command in a pseudo-terminal, for the tests that drive it as a person would
(tests/cli/test_cli.py, tests/measure/test_bench.py)."""
from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time

CMD = [sys.executable, "-m", "localinfer.cli.main"]


class Terminal:
    """The command in a pseudo-terminal, as a person at a keyboard would run it."""

    started: list["Terminal"] = []

    def __init__(self, args, sigint_ignored: bool = False):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child
            if sigint_ignored:  # as a script without job control starts its background commands
                signal.signal(signal.SIGINT, signal.SIG_IGN)
            os.execv(sys.executable, CMD + args)
        self.out = b""
        Terminal.started.append(self)

    def kill(self) -> None:
        """Ends the program if a failed test left it running."""
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def expect(self, needle: str, timeout: float = 60, min_bytes: int = 0) -> str:
        deadline = time.time() + timeout
        while needle.encode() not in self.out or len(self.out) < min_bytes:
            if time.time() > deadline:
                raise AssertionError(f"did not see {needle!r} in:\n{self.out.decode(errors='replace')}")
            ready, _, _ = select.select([self.fd], [], [], 0.5)
            if ready:
                try:
                    self.out += os.read(self.fd, 4096)
                except OSError:  # the program has exited
                    raise AssertionError(f"exited before {needle!r}:\n{self.out.decode(errors='replace')}")
        return self.out.decode(errors="replace")

    def wait(self, timeout: float = 30) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                if select.select([self.fd], [], [], 0.2)[0]:
                    self.out += os.read(self.fd, 4096)
            except OSError:
                pass
        os.kill(self.pid, 9)
        raise AssertionError("the program did not exit")
