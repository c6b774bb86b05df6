"""run_load's phases and watchdog against a stand-in streaming server: warmup before the measure callback, a
stall is a hang (LoadAborted) with the records kept, and a dead server ends the load with check_alive's error."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from aiohttp import web

from bench.engine.server import free_port
from bench.load.loadgen import LoadAborted, RequestRecord, run_load


def serve(stall_after: int | None):
    """Streams max_tokens one-token chunks, or stops sending (without closing) after `stall_after` of them."""

    async def completions(request):
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(1, body["max_tokens"] + 1):
            if stall_after is not None and i > stall_after:
                await asyncio.sleep(3600)
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": i}
            await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    port, loop = free_port(), asyncio.new_event_loop()
    runner = web.AppRunner(web.Application())
    runner.app.add_routes([web.post("/v1/completions", completions)])

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    time.sleep(0.3)  # the site binds in its thread
    return f"http://127.0.0.1:{port}", loop


def load(url: str, records: list[RequestRecord], **kw):
    args = dict(prompts=[[5, 6, 7]] * 5, warmup_count=2, max_tokens=4, concurrency=2, stall_s=30, timeout_s=30)
    args.update(kw)
    return run_load(url, "m", records=records, check_alive=args.pop("check_alive", lambda: None), **args)


def test_warmup_then_measure_callback_then_measured_requests():
    url, loop = serve(None)
    seen: list[tuple[str, int]] = []
    records: list[RequestRecord] = []
    try:
        out = load(url, records, on_measure_start=lambda: seen.append(("measure", len(records))))
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert out is records and seen == [("measure", 2)], "the callback runs after both warmup requests"
    assert [r.phase for r in sorted(out, key=lambda r: r.index)] == ["warmup"] * 2 + ["measure"] * 3
    assert all(r.status == "ok" and r.output_tokens == 4 and r.chunk_tokens == [1] * 4 for r in out)


def test_stall_is_a_hang_and_keeps_the_records():
    url, loop = serve(stall_after=2)
    records: list[RequestRecord] = []
    t0 = time.monotonic()
    try:
        with pytest.raises(LoadAborted) as info:
            load(url, records, warmup_count=0, stall_s=1.5)
    finally:
        loop.call_soon_threadsafe(loop.stop)
    assert (info.value.reason, info.value.detail) == ("hang", "no streamed token for 2 s")
    assert time.monotonic() - t0 < 10
    assert len(records) == 2 and all(r.chunk_tokens == [1, 1] for r in records)


def test_dead_server_ends_the_load_with_its_error():
    url, loop = serve(stall_after=1)
    deaths = []

    def check_alive():
        if len(deaths) >= 2:
            raise RuntimeError("server exited with code -9")
        deaths.append(1)

    try:
        with pytest.raises(RuntimeError, match="server exited"):
            load(url, [], warmup_count=0, check_alive=check_alive)
    finally:
        loop.call_soon_threadsafe(loop.stop)
