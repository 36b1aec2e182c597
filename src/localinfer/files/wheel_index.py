"""A wheel straight from a package index, for an environment without pip (uv makes venvs without it):
the Simple API (PEP 691's JSON, or PEP 503's HTML) lists a project's files with their SHA-256s; the
py3-none-any wheel of the pinned version is downloaded and checked against it.

The index is $PIP_INDEX_URL, else $UV_INDEX_URL / $UV_DEFAULT_INDEX, else PyPI's, so a mirror set up
for pip or uv serves this too.
"""
from __future__ import annotations

import hashlib
import html
import json
import os
import re
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

from .cache import CHUNK, FetchError

PYPI_SIMPLE = "https://pypi.org/simple/"
TIMEOUT_S = 60  # per network read: a stalled connection is an error, not a hang
_ANCHOR = re.compile(r'<a\s[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', re.IGNORECASE)


def index_url() -> str:
    for name in ("PIP_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX"):
        if os.environ.get(name):
            return os.environ[name].rstrip("/") + "/"
    return PYPI_SIMPLE


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()   # PEP 503


def _files(project: str) -> list[tuple[str, str, str | None]]:
    """(filename, absolute url, sha256 or None) of a project's files on the index."""
    page = urljoin(index_url(), _normalized(project) + "/")
    req = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            kind, body = r.headers.get("Content-Type", ""), r.read(32 << 20)
    except OSError as e:
        raise FetchError(f"the package index {page} could not be read: {e}") from None
    if "json" in kind:
        data = json.loads(body)
        return [(f["filename"], urljoin(page, f["url"]), (f.get("hashes") or {}).get("sha256"))
                for f in data.get("files", [])]
    out = []
    for href, text in _ANCHOR.findall(body.decode("utf-8", errors="replace")):
        url, _, fragment = html.unescape(href).partition("#")
        sha = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        out.append((text.strip(), urljoin(page, url), sha))
    return out


def download_wheel(requirement: str, dest: Path) -> Path:
    name, sep, version = requirement.partition("==")
    if not sep or not name or not version:
        raise FetchError(f"{requirement!r} is not NAME==VERSION")
    prefix = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    wheels = [(f, url, sha) for f, url, sha in _files(name)
              if f.lower().startswith(prefix) and f.endswith(("-py3-none-any.whl", "-py2.py3-none-any.whl"))]
    if not wheels:
        raise FetchError(f"the package index {index_url()} has no pure-Python wheel of {requirement}")
    filename, url, sha = wheels[0]
    if not sha:
        raise FetchError(f"the package index gives no SHA-256 for {filename}: it cannot be checked")
    target = dest / Path(filename).name
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r, open(target, "wb") as out:
            while block := r.read(CHUNK):
                out.write(block)
                digest.update(block)
    except OSError as e:
        raise FetchError(f"downloading {url} failed: {e}") from None
    if digest.hexdigest() != sha:
        target.unlink()
        raise FetchError(f"{filename} does not match the index's sha256 ({digest.hexdigest()} != {sha})")
    return target
