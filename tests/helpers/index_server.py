"""A small package index over real HTTP for the index tests: PEP 503 HTML or PEP 691 JSON
project pages, wheel files with (or, on request, without) byte ranges, PEP 658 ``.metadata``
files, and a forward-proxy mode (absolute-URI requests) to check that pip's proxy setting is used."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def make_wheel(directory: Path, name: str, version: str, tag: str, requires: list[str],
               filler: int = 0) -> Path:
    """A valid wheel (dist-info with METADATA, WHEEL, RECORD); `filler` bytes of payload in front."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-{tag}.whl"
    meta = "Metadata-Version: 2.1\n" + f"Name: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        if filler:
            zf.writestr(f"{name.replace('-', '_')}/payload.bin", os.urandom(filler), zipfile.ZIP_STORED)
        zf.writestr(f"{name.replace('-', '_')}/__init__.py", "")
        zf.writestr(f"{dist}.dist-info/METADATA", meta)
        zf.writestr(f"{dist}.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


class IndexServer:
    """Serves `files` (project -> list of wheel paths) under /simple/<project>/ and /files/."""

    def __init__(self, files: dict[str, list[Path]], style: str = "json", ranges: bool = True,
                 metadata_files: bool = False):
        self.files = files
        self.style, self.ranges, self.metadata_files = style, ranges, metadata_files
        self.requests: list[tuple[str, str, str | None]] = []  # (path, range, proxied host)
        self.bytes_sent = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path, proxied = self.path, None
                if path.startswith("http://"):  # a forward-proxy request
                    proxied = path.split("/")[2]
                    path = "/" + path.split("/", 3)[3]
                server.requests.append((path, self.headers.get("Range"), proxied))
                server.handle(self, path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _wheel(self, name: str) -> Path | None:
        return next((p for ps in self.files.values() for p in ps if p.name == name), None)

    def handle(self, h, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            return self._page(h, parts[1])
        if len(parts) == 2 and parts[0] == "files":
            name = parts[1]
            if name.endswith(".metadata") and self.metadata_files:
                wheel = self._wheel(name[: -len(".metadata")])
                if wheel:
                    with zipfile.ZipFile(wheel) as zf:
                        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
                        return self._send(h, 200, zf.read(meta), "text/plain")
            wheel = self._wheel(name)
            if wheel:
                return self._file(h, wheel.read_bytes())
        self._send(h, 404, b"not found", "text/plain")

    def _page(self, h, project: str) -> None:
        wheels = self.files.get(project)
        if wheels is None:
            return self._send(h, 404, b"no such project", "text/plain")
        entries = []
        for p in wheels:
            data = p.read_bytes()
            with zipfile.ZipFile(p) as zf:
                meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA")))
            entries.append((p.name, hashlib.sha256(data).hexdigest(), hashlib.sha256(meta).hexdigest()))
        if self.style == "json":
            body = json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": [
                {"filename": n, "url": f"/files/{n}", "hashes": {"sha256": h256},
                 **({"core-metadata": {"sha256": m256}} if self.metadata_files else {})}
                for n, h256, m256 in entries]}).encode()
            return self._send(h, 200, body, "application/vnd.pypi.simple.v1+json")
        links = "".join(
            f'<a href="../../files/{n}#sha256={h256}"'
            + (f' data-core-metadata="sha256={m256}"' if self.metadata_files else "") + f">{n}</a><br/>\n"
            for n, h256, m256 in entries)
        self._send(h, 200, f"<html><body>{links}</body></html>".encode(), "text/html")

    def _file(self, h, data: bytes) -> None:
        rng = h.headers.get("Range")
        if not (self.ranges and rng and rng.startswith("bytes=")):
            return self._send(h, 200, data, "application/zip")
        spec = rng[len("bytes="):]
        if spec.startswith("-"):
            start, end = max(0, len(data) - int(spec[1:])), len(data) - 1
        else:
            lo, _, hi = spec.partition("-")
            start, end = int(lo), min(len(data) - 1, int(hi) if hi else len(data) - 1)
        body = data[start:end + 1]
        self._send(h, 206, body, "application/zip", {"Content-Range": f"bytes {start}-{end}/{len(data)}"})

    def _send(self, h, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)
        self.bytes_sent += len(body)
