"""The bench's one synchronous HTTP client, for the short calls around a run: health, /metrics, /v1/models,
/version, profiler start/stop, one probing request. The load itself is asynchronous and streamed
(bench.load.loadgen, aiohttp). Errors are OSError (urllib's URLError and HTTPError are OSErrors; a timeout is too)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def get(url: str, timeout: float) -> bytes:
    """The body of a GET; OSError when the server does not answer or answers an HTTP error."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read()


def status(url: str, timeout: float) -> int | None:
    """The HTTP status of a GET, None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def post(url: str, body: dict | None, timeout: float) -> bytes:
    """POST `body` as JSON (an empty body when None); the response body; OSError as for get."""
    data = b"" if body is None else json.dumps(body).encode()
    headers = {} if body is None else {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.read()


def scrape(base_url: str, timeout: float = 10) -> str:
    return get(base_url + "/metrics", timeout).decode()
