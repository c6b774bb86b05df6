"""Async streaming load generator over the OpenAI completions API.

Exact prompt lengths (token ids, verified against the server's usage count), seeded, fixed concurrency, warmup
excluded, and raw per-request records: send time, every chunk's arrival time and token count (from continuous
usage stats, so a chunk carrying several speculative tokens counts as several), end time, status, error.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import aiohttp


@dataclass
class RequestRecord:
    index: int
    phase: str  # "warmup" or "measure"
    prompt_len: int
    max_tokens: int
    send_time: float  # seconds, time.perf_counter() clock
    end_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None  # as the server counted them
    output_tokens: int | None = None
    status: str = "pending"  # ok | error
    error: str | None = None

    def to_row(self) -> dict:
        return asdict(self)


class LoadAborted(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def make_prompts(n: int, input_len: int, vocab: int | Sequence[int], seed: int, low: int = 3) -> list[list[int]]:
    """Seeded token-id prompts of exactly input_len tokens each, drawn from `vocab`: the ids a prompt may use
    (bench.launch.prompt_ids: no special id), or a vocab size whose special ids all lie below `low`."""
    ids = range(low, vocab) if isinstance(vocab, int) else vocab
    rng = random.Random(seed)
    return [[rng.choice(ids) for _ in range(input_len)] for _ in range(n)]


@dataclass
class _Load:
    """One run_load call: where its requests go, what each asks for, where records land, and when a token last
    arrived (the stall watchdog's clock)."""

    url: str  # the completions endpoint
    model: str
    max_tokens: int
    concurrency: int
    timeout_s: float  # per request
    records: list[RequestRecord]
    last_token: float = field(default_factory=time.perf_counter)

    def tick(self) -> None:
        self.last_token = time.perf_counter()


async def _one(session: aiohttp.ClientSession, load: _Load, rec: RequestRecord, prompt: list[int]) -> None:
    body = {
        "model": load.model,
        "prompt": prompt,
        "max_tokens": rec.max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    rec.send_time = time.perf_counter()
    try:
        async with session.post(load.url, json=body, timeout=aiohttp.ClientTimeout(total=load.timeout_s)) as resp:
            if resp.status != 200:
                rec.status, rec.error = "error", f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return
            finished, completed = await _read_stream(resp, rec, load)
        rec.end_time = time.perf_counter()
        rec.output_tokens = completed
        rec.status, rec.error = _verdict(rec, finished, completed, bool(body["ignore_eos"]))
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        rec.end_time = time.perf_counter()
        rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        load.tick()


async def _read_stream(resp: aiohttp.ClientResponse, rec: RequestRecord, load: _Load) -> tuple[bool, int]:
    """Record each chunk that carries new tokens (arrival time, token count from the usage stats) until [DONE].
    Returns (ended with [DONE], completion tokens)."""
    completed = 0
    buffer = b""
    async for data in resp.content.iter_any():  # whole network reads; events split here (cheaper)
        now = time.perf_counter()
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            payload = event.strip()[5:].strip() if event.strip().startswith(b"data:") else b""
            if not payload:
                continue
            if payload == b"[DONE]":
                return True, completed
            usage = json.loads(payload).get("usage") or {}
            done = usage.get("completion_tokens")
            if done is not None and done > completed:
                rec.chunk_times.append(now)
                rec.chunk_tokens.append(done - completed)
                completed = done
                load.tick()
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
    return False, completed


def _verdict(rec: RequestRecord, finished: bool, completed: int, ignore_eos: bool) -> tuple[str, str | None]:
    """A stream is ok only when complete: it ended with [DONE], carried usage, the server counted the prompt we
    sent, and (under ignore_eos) produced every asked token. Anything else is a truncated or unmeasurable
    request, never a short success."""
    if not finished:
        return "error", f"truncated: the stream ended before [DONE] after {completed} tokens"
    if rec.prompt_tokens is None:
        return "error", "the stream carried no usage: token counts unknown"
    if rec.prompt_tokens != rec.prompt_len:
        return "error", f"server counted {rec.prompt_tokens} prompt tokens, sent {rec.prompt_len}"
    if ignore_eos and completed < rec.max_tokens:
        return "error", f"truncated: {completed} of {rec.max_tokens} tokens under ignore_eos"
    return "ok", None


async def _run_phase(load: _Load, prompts: list[list[int]], phase: str, first_index: int) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    for i, prompt in enumerate(prompts):
        queue.put_nowait((first_index + i, prompt))
    connector = aiohttp.TCPConnector(limit=load.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                index, prompt = queue.get_nowait()
                rec = RequestRecord(index, phase, len(prompt), load.max_tokens, send_time=0.0)
                load.records.append(rec)
                await _one(session, load, rec, prompt)

        await asyncio.gather(*(worker() for _ in range(min(load.concurrency, len(prompts)))))


async def _watch(load: _Load, stall_s: float, is_alive: Callable[[], None], done: asyncio.Event) -> None:
    while not done.is_set():
        await asyncio.sleep(0.5)
        is_alive()  # raises when the server died
        if time.perf_counter() - load.last_token > stall_s:
            raise LoadAborted("hang", f"no streamed token for {stall_s:.0f} s")


async def _drive(
    load: _Load,
    warmup: list[list[int]],
    measure: list[list[int]],
    stall_s: float,
    check_alive: Callable[[], None],
    on_measure_start: Callable[[], None],
) -> None:
    done = asyncio.Event()

    async def phases() -> None:
        try:
            if warmup:
                await _run_phase(load, warmup, "warmup", 0)
            # The callback may block (it scrapes /metrics): off the event loop.
            await asyncio.get_running_loop().run_in_executor(None, on_measure_start)
            await _run_phase(load, measure, "measure", len(warmup))
        finally:
            done.set()

    main = asyncio.ensure_future(phases())
    watch = asyncio.ensure_future(_watch(load, stall_s, check_alive, done))
    finished, _ = await asyncio.wait({main, watch}, return_when=asyncio.FIRST_COMPLETED)
    if watch in finished and (error := watch.exception()) is not None:
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
        raise error
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    main.result()


def run_load(
    base_url: str,
    model: str,
    *,
    prompts: list[list[int]],
    warmup_count: int,
    max_tokens: int,
    concurrency: int,
    stall_s: float,
    timeout_s: float,
    check_alive: Callable[[], None],
    on_measure_start: Callable[[], None] = lambda: None,
    records: list[RequestRecord] | None = None,
) -> list[RequestRecord]:
    """Run warmup then measured requests; returns every record (warmup included, marked by phase).

    Raises LoadAborted on a hang, or whatever check_alive raises when the server dies; `records`, when given,
    keeps what was recorded up to then.
    """
    records = [] if records is None else records
    load = _Load(base_url + "/v1/completions", model, max_tokens, concurrency, timeout_s, records)
    warmup, measure = prompts[:warmup_count], prompts[warmup_count:]
    asyncio.run(_drive(load, warmup, measure, stall_s, check_alive, on_measure_start))
    return records
