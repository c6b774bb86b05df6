"""A local OpenAI-style completions server that streams pre-made tokens as fast as it can (for measuring client
capacity only: it never stands in for vLLM in a test of the suite). Each request streams exactly max_tokens
chunks of one token, with continuous usage stats; events are written in batches so the server stays cheap.

Usage: python benchmarks/fake_stream_server.py PORT
"""

import json
import sys

from aiohttp import web

BATCH = 64


def event(i: int, prompt_tokens: int, done: bool) -> bytes:
    chunk = {
        "id": "cmpl-x",
        "object": "text_completion",
        "created": 0,
        "model": "tiny",
        "choices": [
            {
                "index": 0,
                "text": " w7",
                "logprobs": None,
                "finish_reason": "length" if done else None,
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": i + 1, "total_tokens": prompt_tokens + i + 1},
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


async def completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    n = int(body.get("max_tokens") or 16)
    prompt = body.get("prompt")
    prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for start in range(0, n, BATCH):
        await resp.write(b"".join(event(i, prompt_tokens, i == n - 1) for i in range(start, min(n, start + BATCH))))
    await resp.write(b"data: [DONE]\n\n")
    return resp


async def models(_request):
    return web.json_response({"object": "list", "data": [{"id": "tiny", "object": "model"}]})


async def health(_request):
    return web.Response(text="ok")


app = web.Application()
app.add_routes(
    [
        web.post("/v1/completions", completions),
        web.get("/v1/models", models),
        web.get("/health", health),
    ]
)

if __name__ == "__main__":
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
