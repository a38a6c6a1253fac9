"""A registry over real HTTP that has no images: the Docker engine talks to it as to any registry (localhost is
plain HTTP for the engine), so the tests see the engine's own answers for "no such image" and "denied"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class EmptyRegistry:
    """/v2/ answers like a registry; every manifest is unknown; repositories under denied/ are refused, under limited/
    rate-limited."""

    def __enter__(self) -> EmptyRegistry:
        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v2/":
                    self._send(200, {})
                elif self.path.startswith("/v2/denied/"):
                    self._send(403, {"errors": [{"code": "DENIED", "message": "requested access is denied"}]})
                elif self.path.startswith("/v2/limited/"):
                    self._send(429, {"errors": [{"code": "TOOMANYREQUESTS", "message": "pull rate limit reached"}]})
                else:
                    self._send(404, {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "manifest unknown"}]})

            do_HEAD = do_GET

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"localhost:{self.server.server_address[1]}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
