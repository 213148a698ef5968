"""A stand-in for the Hugging Face hub on a loopback port (a thread, stdlib http.server): the
endpoints `manage.py pull` and huggingface_hub use, for repos the test builds from files.

- GET /api/models/{repo}[/revision/{rev}]: the repo, `siblings` with sizes, blob ids and LFS
  sha256 (with ?blobs=true, as the hub);
- GET /api/models/{repo}/tree/{rev}: the file list snapshot_download reads;
- HEAD/GET /{repo}/resolve/{rev}/{file}: small files answered in place, LFS files (weights)
  redirected to /cdn/{sha256} on a second port, as the hub redirects to its CDN, with
  X-Linked-Etag and X-Linked-Size on the redirect; GET honours Range (206).

`drop[file] = n` ends the next n responses for that file halfway through its bytes;
`corrupt[file] = bytes` serves other content than the listing's checksum says;
`pace[file] = seconds` spreads that file's body over about so many seconds (progress to watch);
`requests` records (method, path, Range header).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
LFS_SUFFIXES = (".safetensors", ".gguf")


def blob_id(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


@dataclass
class Hub:
    url: str = ""
    cdn_url: str = ""  # another origin, as the hub's CDN is: clients keep their token off it
    repos: dict[str, dict[str, Path]] = field(default_factory=dict)
    drop: dict[str, int] = field(default_factory=dict)
    corrupt: dict[str, bytes] = field(default_factory=dict)
    pace: dict[str, float] = field(default_factory=dict)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    _sha: dict[Path, str] = field(default_factory=dict)

    def add_repo(self, repo: str, folder: Path, names: list[str] | None = None) -> None:
        names = names or sorted(p.name for p in folder.iterdir() if p.is_file())
        self.repos[repo] = {name: folder / name for name in names}

    def sha256(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = hashlib.sha256(path.read_bytes()).hexdigest()
        return self._sha[path]

    def entry(self, name: str, path: Path) -> dict:
        """A file as the hub's API describes it."""
        size = path.stat().st_size
        described = {"rfilename": name, "size": size, "blobId": blob_id(path.read_bytes())}
        if name.endswith(LFS_SUFFIXES):
            described["lfs"] = {"sha256": self.sha256(path), "size": size, "pointerSize": 134}
        return described


class Handler(BaseHTTPRequestHandler):
    hub: Hub

    def log_message(self, *args) -> None:  # quiet test output
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append((self.command, path, self.headers.get("Range")))
        if path.startswith("/api/models/"):
            return self._api(path.removeprefix("/api/models/"))
        if path.startswith("/cdn/"):
            return self._cdn(path.removeprefix("/cdn/"), body)
        if "/resolve/" in path:
            return self._resolve(path.lstrip("/"), body)
        self._json({"error": "not found"}, 404)

    def _api(self, rest: str) -> None:
        repo = rest.split("/tree/")[0] if "/tree/" in rest else rest.split("/revision/")[0]
        files = self.hub.repos.get(repo)
        if files is None:
            return self._json(
                {"error": "Repository not found"}, 404, {"X-Error-Code": "RepoNotFound"}
            )
        entries = [self.hub.entry(name, path) for name, path in files.items()]
        if "/tree/" in rest:
            return self._json([_tree_entry(entry) for entry in entries])
        self._json(
            {"id": repo, "modelId": repo, "sha": COMMIT, "siblings": entries, "private": False}
        )

    def _resolve(self, rest: str, body: bool) -> None:
        repo_part, _, file_part = rest.partition("/resolve/")
        name = file_part.partition("/")[2]
        path = self.hub.repos.get(repo_part, {}).get(name)
        if path is None:
            return self._json({"error": "Entry not found"}, 404, {"X-Error-Code": "EntryNotFound"})
        entry = self.hub.entry(name, path)
        common = {"X-Repo-Commit": COMMIT}
        if "lfs" in entry:  # weights live on the CDN, as on the hub
            sha = entry["lfs"]["sha256"]
            self.send_response(302)
            headers = {
                **common,
                "Location": f"{self.hub.cdn_url}/cdn/{sha}",
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(entry["size"]),
                "Content-Length": "0",
            }
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            return
        self._content(name, path, {**common, "ETag": f'"{entry["blobId"]}"'}, body)

    def _cdn(self, sha: str, body: bool) -> None:
        for files in self.hub.repos.values():
            for name, path in files.items():
                if name.endswith(LFS_SUFFIXES) and self.hub.sha256(path) == sha:
                    return self._content(name, path, {"ETag": f'"{sha}"'}, body)
        self._json({"error": "not found"}, 404)

    def _content(self, name: str, path: Path, headers: dict, body: bool) -> None:
        content = self.hub.corrupt.get(name, path.read_bytes())
        start = _range_start(self.headers.get("Range"))
        status = 206 if start else 200
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(content) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        self.end_headers()
        if not body:
            return
        if body and self.hub.drop.get(name, 0) > 0:
            self.hub.drop[name] -= 1
            self.wfile.write(content[start : start + (len(content) - start) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self._write(content[start:], self.hub.pace.get(name, 0.0))

    def _write(self, data: bytes, seconds: float) -> None:
        if seconds <= 0:
            self.wfile.write(data)
            return
        pieces = 20
        step = -(-len(data) // pieces)
        for offset in range(0, len(data), step):
            self.wfile.write(data[offset : offset + step])
            self.wfile.flush()
            time.sleep(seconds / pieces)

    def _json(self, document: object, status: int = 200, headers: dict | None = None) -> None:
        import json

        data = json.dumps(document).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    return int(header.removeprefix("bytes=").split("-")[0] or 0)


def _tree_entry(entry: dict) -> dict:
    tree = {
        "type": "file",
        "path": entry["rfilename"],
        "size": entry["size"],
        "oid": entry["blobId"],
    }
    if "lfs" in entry:
        tree["lfs"] = {"oid": entry["lfs"]["sha256"], "size": entry["size"], "pointerSize": 134}
    return tree


@contextmanager
def stand_in_hub() -> Iterator[Hub]:
    hub = Hub()
    handler = type("BoundHandler", (Handler,), {"hub": hub})
    servers = [ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(2)]
    hub.url, hub.cdn_url = (f"http://127.0.0.1:{s.server_address[1]}" for s in servers)
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hub
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
