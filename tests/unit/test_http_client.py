"""bench.load.http_client against a real local HTTP server (the standard library's)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.load import http_client as http


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        code = 200 if self.path == "/health" else 503
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"ok" if code == 200 else b"starting")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(json.dumps({"got": body.decode(), "type": self.headers.get("Content-Type")}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def base():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_get_status_and_post(base):
    assert http.get(base + "/health", 5) == b"ok"
    assert http.status(base + "/health", 5) == 200 and http.status(base + "/loading", 5) == 503
    with pytest.raises(OSError):
        http.get(base + "/loading", 5)
    assert json.loads(http.post(base + "/x", {"a": 1}, 5)) == {"got": '{"a": 1}', "type": "application/json"}
    assert json.loads(http.post(base + "/x", None, 5))["got"] == ""


def test_nothing_listening_is_none_or_oserror():
    url = f"http://127.0.0.1:{_closed_port()}/health"
    assert http.status(url, 2) is None
    with pytest.raises(OSError):
        http.get(url, 2)
