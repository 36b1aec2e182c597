"""Repacking after load: the first token does not wait for the copy of matrices that give the same
bits in either layout.

A repacked matrix (kernels.repack_layout) is a copy of the mapped rows in fresh anonymous memory.
For an 8B Q8_0 file that is 7.4 GB the OS must hand over and zero before the first token, where
llama.cpp's AVX2 build, which reads Q8_0 as mapped, touches none. Where the active ISA's repacked
layout gives the row-major bits for any number of rows (kernels.layout_same_bits: AVX2 Q8_0), the
loader keeps those matrices as mapped (WeightLoader.deferred) and this thread copies them one at a
time after load, each swapped in whole: `linear.mat` is replaced by one reference assignment, and
the model's `weights_version` goes up so that DecoderModel builds its fused C layers anew before
the next forward pass (one already running keeps the old pointers, into the mapping, which stays
valid). No result changes at any moment, so nothing waits for the swap. The mapped pages of a
swapped matrix go back to the file once no forward pass that began before the swap is still
running (`forward_pass`): one that is would fault them in again, for good, so memory would grow
towards twice the file instead of staying about its size. Until they have gone back, the next copy
waits: memory stays within the file's size and one matrix (a long prompt's pass holds at most one).

While a forward pass runs, the thread copies on itself alone (kernels.set_pool_alone), leaving the C pool
to the pass; between passes (a chat waiting for its user) it takes the pool, a piece at a time. Most of
a copy's time is the OS zeroing the new pages (83% of an 8B Q8_0 repack's samples on a VM whose
freed memory goes back to the host), and each thread zeroes the pages it touches.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref

from ..backend import kernels


class _Stopped(Exception):
    pass


class DeferredRepack:
    """Repacks `linears` (KernelLinears of `model`, row-major, of a same-bits type) in the background
    once `start`ed (Model does), or one by one with `swap_next`; `wait` for all of them; `stop`
    (idempotent) ends the thread within a piece and leaves the rest as mapped."""

    def __init__(self, model, f, linears: list):
        self._model = weakref.ref(model)   # an abandoned model is not kept alive by its repack
        self._f, self._todo = f, list(linears)
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._thread = None
        self.error: BaseException | None = None   # what stopped the thread, if not `stop`
        self._lock = threading.Lock()   # guards the two below
        self._released = threading.Condition(self._lock)   # notified when _unreleased empties
        self._in_flight = 0             # forward passes running (forward_pass)
        self._unreleased: list[str] = []   # tensors swapped out while one was
        if not self._todo:
            self._done.set()

    @property
    def pending(self) -> int:
        return len(self._todo)

    def start(self) -> None:
        if self._thread is not None or self._done.is_set():
            return
        self._thread = threading.Thread(target=self._run, name="localinfer-repack", daemon=True)
        _live.add(self)
        self._thread.start()

    def wait(self, timeout: float | None = None) -> bool:
        """True once every matrix is repacked (or the repack stopped); False if `timeout` ran out, or
        at once if the thread was never started and some are left."""
        if self._thread is None and not self._done.is_set():
            return not self._todo
        return self._done.wait(timeout)

    def stop(self) -> None:
        """Ends the thread (after the piece it is copying) and leaves the rest as mapped."""
        self._stopping.set()
        with self._released:
            self._released.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._done.set()

    @contextlib.contextmanager
    def forward_pass(self):
        """Around a forward pass: the tensors swapped out while it ran are released when the last
        pass running ends (it may have read them)."""
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                names, self._unreleased = (self._unreleased, []) if self._in_flight == 0 else ([], self._unreleased)
            for name in names:
                self._f.release(name)
            if names:
                with self._released:
                    self._released.notify_all()

    def swap_next(self) -> bool:
        """Repacks the next matrix on this thread and swaps it in; False when none is left (or `stop`
        was called). What the thread does in a loop; for a caller that runs the repack itself."""
        if not self._todo or self._stopping.is_set():
            return False
        old = kernels.set_pool_alone(self._in_flight > 0)
        try:
            self._swap(self._todo[0])
        except _Stopped:
            return False
        finally:
            kernels.set_pool_alone(old)
        self._todo.pop(0)
        return True

    def _next_piece(self) -> None:
        """Between two pieces of a copy: stop if asked; the pool only while no forward pass runs."""
        if self._stopping.is_set():
            raise _Stopped
        kernels.set_pool_alone(self._in_flight > 0)

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                with self._released:   # the last swapped matrix's pages have gone back
                    self._released.wait_for(lambda: not self._unreleased or self._stopping.is_set())
                if not self.swap_next():
                    break
        except BaseException as e:  # noqa: BLE001 -- the model runs on as mapped; `error` says why
            self.error = e
        finally:
            self._done.set()
            _live.discard(self)

    def _swap(self, linear) -> None:
        new = linear.mat.repacked(self._next_piece)
        model = self._model()
        if new is None or model is None:
            return
        linear.mat = new
        model.weights_version += 1
        names = list(linear.names)   # from here on, read only by a forward pass already running
        with self._lock:
            if self._in_flight:
                self._unreleased += names
                names = []
        for name in names:
            self._f.release(name)
        # (build_with_loader set these counters when it made this repack)
        model.weight_copy_bytes += new.data.nbytes
        model.repacked_bytes += new.data.nbytes
        model.repacked_tensors |= set(linear.names)

    def _forget_thread(self) -> None:
        """In a child process after fork: the thread is not there; the rest stays as mapped."""
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)
        self._in_flight, self._thread, self._todo = 0, None, []
        self._done.set()


def reading_weights(model):
    """Around one forward pass of `model` (a decoder's or an encoder's): while its matrices are being
    swapped in, the pass counts as running (DeferredRepack.forward_pass), so the mapped pages it may
    still read stay until it ends; otherwise nothing."""
    repack = getattr(model, "deferred_repack", None)
    return repack.forward_pass() if repack is not None and repack.pending else contextlib.nullcontext()


_live: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for repack in list(_live):
        repack._forget_thread()
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _stop_all() -> None:
    """Before the interpreter tears down: no copy may still read a mapping that is going away."""
    for repack in list(_live):
        repack.stop()
