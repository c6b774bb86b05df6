"""A stand-in OpenAI server for load generator tests: streamed chat and completions with continuous usage, the
per-request speculative numbers vLLM adds with --per-request-spec-decode-metrics, /metrics counters that grow with
the tokens it streams, /v1/models, /version, /health. It keeps every request body it got."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web

from bench.engine.server import free_port


@dataclass
class StandIn:
    k: int = 3  # speculative positions it reports
    accept: int = 2  # draft tokens every verify step accepts
    request_spec: bool = True  # answers carry metrics.speculative_decoding
    tokens_per_chunk: int = 3
    default_max_tokens: int = 5
    fail_turn: int | None = None  # answer HTTP 500 to chat requests holding this many user messages
    bodies: list[dict] = field(default_factory=list)
    counters: dict = field(default_factory=lambda: {"drafts": 0, "draft_tokens": 0, "accepted": 0, "pos": None})
    url: str = ""

    def answer(self, n: int) -> str:
        return "".join(f"w{i} " for i in range(n))

    def spec(self, n: int) -> dict:
        steps = max(n - 1, 0) // (self.accept + 1) + (1 if max(n - 1, 0) % (self.accept + 1) else 0)
        hist = [0] * (self.k + 1)
        hist[self.accept] = steps
        c = self.counters
        c["drafts"] += steps
        c["draft_tokens"] += steps * self.k
        c["accepted"] += steps * self.accept
        c["pos"] = [(c["pos"] or [0] * self.k)[i] + (steps if i < self.accept else 0) for i in range(self.k)]
        return {
            "mean_acceptance_length": 1 + self.accept,
            "draft_acceptance_rate": self.accept / self.k,
            "acceptance_histogram": hist,
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": steps * self.accept,
            "num_draft_tokens": steps * self.k,
            "num_spec_tokens": self.k,
        }

    async def _stream(self, request: web.Request, body: dict, chat: bool) -> web.StreamResponse:
        self.bodies.append(body)
        users = sum(m["role"] == "user" for m in body.get("messages", []))
        if chat and self.fail_turn is not None and users == self.fail_turn:
            return web.Response(status=500, text="scripted failure")
        n = body.get("max_tokens") or self.default_max_tokens
        prompt = len(json.dumps(body["messages"])) if chat else len(body["prompt"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        words = self.answer(n).split(" ")
        done = 0
        while done < n:
            step = min(self.tokens_per_chunk, n - done)
            text = " ".join(words[done : done + step]) + " "
            done += step
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            if done == n:
                choice["finish_reason"] = "length"
            usage = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
            await resp.write(b"data: " + json.dumps({"choices": [choice], "usage": usage}).encode() + b"\n\n")
            await asyncio.sleep(0.002)
        final: dict = {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": n}}
        spec = self.spec(n)
        if self.request_spec:
            final["metrics"] = {"speculative_decoding": spec}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):  # the load --url probe
            metrics = {"speculative_decoding": self.spec(2)} if self.request_spec else None
            return web.json_response({"choices": [{"message": {"content": "hi"}}], "metrics": metrics})
        return await self._stream(request, body, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, await request.json(), chat=False)

    async def metrics(self, _request: web.Request) -> web.Response:
        c = self.counters
        lines = [
            f"vllm:spec_decode_num_drafts_total {c['drafts']}",
            f"vllm:spec_decode_num_draft_tokens_total {c['draft_tokens']}",
            f"vllm:spec_decode_num_accepted_tokens_total {c['accepted']}",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
            for i, v in enumerate(c["pos"] or [0] * self.k)
        ]
        return web.Response(text="\n".join(lines) + "\n")


def serve(standin: StandIn) -> tuple[StandIn, asyncio.AbstractEventLoop]:
    """Run it in a thread; returns it (its url set) and the loop (stop with loop.call_soon_threadsafe(loop.stop))."""
    port, loop = free_port(), asyncio.new_event_loop()
    app = web.Application()
    app.add_routes(
        [
            web.post("/v1/chat/completions", standin.chat),
            web.post("/v1/completions", standin.completions),
            web.get("/metrics", standin.metrics),
            web.get("/v1/models", _json({"data": [{"id": "m", "root": "/models/m", "max_model_len": 4096}]})),
            web.get("/version", _json({"version": "0.0-standin"})),
            web.get("/health", _json({})),
        ]
    )
    runner = web.AppRunner(app)

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        loop.run_forever()

    threading.Thread(target=run, daemon=True).start()
    time.sleep(0.3)  # the site binds in its thread
    standin.url = f"http://127.0.0.1:{port}"
    return standin, loop


def _json(data: dict):
    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(data)

    return handler
