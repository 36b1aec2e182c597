"""The browser chat page at `/`: static files shipped inside the package, and the one JSON
route (`/props`) the page reads to show the model's name and context size.

Kept apart from the HTTP plumbing (asgi.py), which only
has to map `page_file(path)` and `props(...)` onto its routes. The page talks to the server
through the public API only (/v1/chat/completions with streaming), as any other client does.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

# URL path ("": the page itself, served at "/") -> file in the package's webui/ folder. The page names
# the others by relative URLs, so it works wherever the app is mounted.
PAGE_FILES = {"": "index.html", "/webui/app.js": "app.js", "/webui/markdown.js": "markdown.js",
              "/webui/style.css": "style.css"}
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}

# The page loads nothing from elsewhere (no CDN, no inline script): a browser enforces it.
HEADERS = {
    "Cache-Control": "no-cache",  # revalidate each load (ETag): an upgraded package shows its new page at once
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class PageFile:
    body: bytes
    content_type: str
    etag: str


@lru_cache(maxsize=None)
def page_file(path: str) -> PageFile | None:
    """The file served at `path`, or None when `path` is not one of the page's."""
    name = PAGE_FILES.get(path)
    if name is None:
        return None
    body = resources.files(__package__).joinpath("webui", name).read_bytes()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    return PageFile(body, _TYPES[name[name.rindex("."):]], etag)


def props(model_name: str, n_ctx: int, n_slots: int) -> dict:
    """What the page shows about the server (named after llama-server's /props)."""
    return {"model": model_name, "n_ctx": n_ctx, "total_slots": n_slots}
