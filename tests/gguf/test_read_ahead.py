"""files/read_ahead.py: the model file asked for ahead of the loader, a bounded window at a time.

What is asked for is checked through `issued` (how far the OS has been asked); whether the OS reads
it is the kernel's business, and what it buys is in BENCHMARKS.md (cold starts)."""
from __future__ import annotations

import os
import threading

import pytest

from localinfer.files import read_ahead as ra

pytestmark = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this OS")

MiB = 1 << 20


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(64 * 1024) * 16)   # 1 MiB
    return str(path)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


def test_the_window_follows_the_loader_and_stops_at_the_end(data_file):
    fds = _open_fds()
    with ra.ReadAhead(data_file, 4096, MiB, window=256 * 1024, chunk=64 * 1024) as ahead:
        assert ahead.caught_up(timeout=60)
        assert ahead.issued == 4096 + 256 * 1024           # the window past the start, no further
        ahead.at(100_000)
        assert ahead.caught_up(timeout=60) and ahead.issued == 100_000 + 256 * 1024
        ahead.at(50_000)                                    # never back
        assert ahead.caught_up(timeout=60) and ahead.issued == 100_000 + 256 * 1024
        ahead.at(900_000)
        assert ahead.caught_up(timeout=60) and ahead.issued == MiB   # not past the end
    assert not any(t.name == "localinfer-read-ahead" for t in threading.enumerate())
    assert _open_fds() == fds


def test_bad_windows_and_empty_ranges(data_file):
    with pytest.raises(ValueError, match="positive"):
        ra.ReadAhead(data_file, 0, MiB, window=0)
    assert ra.read_ahead(data_file, 10, 10) is None
    with pytest.raises(FileNotFoundError):
        ra.read_ahead(data_file + ".missing", 0, MiB)


def test_loading_a_repacked_model_reads_ahead_of_each_tensor(smollm2_path, monkeypatch):
    """The loader tells the read-ahead each tensor's offset as it takes it, and closes it when done."""
    import localinfer
    from localinfer.arch import weights
    from localinfer.backend import kernels
    if not kernels.available():
        pytest.skip("C kernels not built: nothing is repacked")
    made = []

    class Recording(ra.ReadAhead):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.offsets, self.closed = [], False
            made.append(self)

        def at(self, offset):
            self.offsets.append(offset)
            super().at(offset)

        def close(self):
            self.closed = True
            super().close()

    monkeypatch.setattr(weights, "read_ahead", lambda path, start, end: Recording(path, start, end))
    with localinfer.load(str(smollm2_path), n_ctx=64, repack=True) as model:
        (ahead,) = made
        offsets = {t.offset for t in model.gguf.tensors.values()}
        assert ahead.closed and len(ahead.offsets) >= 30 and set(ahead.offsets) <= offsets
    made.clear()
    with localinfer.load(str(smollm2_path), n_ctx=64, repack=False):
        assert made == []   # nothing is copied out of the mapping: the first token's reads are the load
