"""A Hugging Face Hub on loopback for the tests: the routes huggingface_hub calls to list a model
repository's files (with LFS sizes and SHA-256s) and download them, with HEAD metadata and ranges.
Point HF_ENDPOINT at `hub.url`; no test reaches the real Hub.

    with FakeHub({"user/repo": {"model.Q4_K_M.gguf": path_or_bytes, ...}}) as hub: ...
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, bytes | Path]]):
        self.repos = {repo: {name: Path(v).read_bytes() if isinstance(v, Path) else v for name, v in files.items()}
                      for repo, files in repos.items()}
        self.downloads: list[str] = []   # the files whose bodies were sent, in order
        self.corrupt: set[str] = set()   # "repo/file" whose body is sent with one byte changed

    def __enter__(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body=b"", headers=None, head=False):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _route(self, head: bool):
                path = unquote(urlparse(self.path).path)
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 4:
                    repo = "/".join(parts[2:4])
                    if repo not in hub.repos:
                        return self._send(404, b'{"error": "Repository not found"}',
                                          {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})
                    siblings = [{"rfilename": name, "size": len(data),
                                 "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data),
                                         "pointerSize": 134}} for name, data in hub.repos[repo].items()]
                    body = json.dumps({"id": repo, "modelId": repo, "sha": COMMIT, "private": False,
                                       "siblings": siblings}).encode()
                    return self._send(200, body, {"Content-Type": "application/json"}, head)
                if len(parts) >= 5 and parts[2] == "resolve":
                    repo, name = "/".join(parts[:2]), "/".join(parts[4:])
                    data = hub.repos.get(repo, {}).get(name)
                    if data is None:
                        return self._send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
                    if f"{repo}/{name}" in hub.corrupt:
                        data = bytes([data[0] ^ 1]) + data[1:]
                    sha = hashlib.sha256(hub.repos[repo][name]).hexdigest()
                    headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"',
                               "X-Linked-Size": str(len(data)), "Accept-Ranges": "bytes"}
                    status, rng = 200, self.headers.get("Range")
                    if rng and rng.startswith("bytes=") and not head:
                        start = int(rng[6:].split("-")[0])
                        headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                        data, status = data[start:], 206
                    if not head:
                        hub.downloads.append(f"{repo}/{name}")
                    return self._send(status, data, headers, head)
                return self._send(404, b"")

            def do_GET(self):
                self._route(head=False)

            def do_HEAD(self):
                self._route(head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
