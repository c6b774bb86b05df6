"""Async streaming load generator over the OpenAI API: raw per-request records for every request.

Two kinds of load, one sender:
- random token ids of exact length on /v1/completions (verified against the server's usage count), greedy with
  EOS ignored, so every request produces exactly max_tokens tokens;
- text conversations on /v1/chat/completions (bench.workloads): the server applies the chat template; each turn
  is sent after the model's own answer to the one before (multi-turn replay); sampling as the workload says.
Requests are sent by an arrival schedule (bench.workloads.arrival: fixed concurrency, or a rate with burstiness
and a cap), one schedule slot per prompt or per whole conversation. Every record keeps the send time, every
chunk's arrival time and token count (from continuous usage stats, so a chunk carrying several speculative tokens
counts as several), end, status, error, and where the request was due, arrived and started on the pacer's clock;
the server's per-request speculative-decoding numbers when it sends them (vLLM --per-request-spec-decode-metrics).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import aiohttp

from bench.workloads.arrival import Arrival, Schedule, pace, schedule
from bench.workloads.conversation import Conversation
from bench.workloads.point import RANDOM_CATEGORY, Sampling

STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


@dataclass
class RequestRecord:
    index: int
    phase: str  # "warmup" or "measure"
    prompt_len: int | None  # tokens sent (random ids); None for text (the server's count is prompt_tokens)
    max_tokens: int | None  # None: the answer ends at EOS (or the context limit)
    send_time: float  # seconds, time.perf_counter() clock
    end_time: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int | None = None  # as the server counted them
    output_tokens: int | None = None
    status: str = "pending"  # ok | error
    error: str | None = None
    workload: str | None = None  # the workload id (None: the default random workload)
    category: str | None = None
    conversation: str | None = None  # the conversation's id in its dataset (text)
    turn: int | None = None  # 0-based user turn of the conversation (text)
    due_s: float | None = None  # when its slot was due, from the start of its phase (the arrival schedule)
    arrival_time: float | None = None  # when it was due and the pacer woke (perf_counter clock)
    start_time: float | None = None  # when it got a concurrency slot (a conversation: its first turn's)
    finish_reason: str | None = None
    spec_steps: int | None = None  # the server's per-request speculative-decoding numbers, when it sent them
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_histogram: list[int] | None = None  # verify steps that accepted exactly j draft tokens, j = 0..k
    slot: int | None = None  # the closed loop's worker that sent it (bench.measure.window.first_of_each_slot)

    def to_row(self) -> dict:
        return asdict(self)


class LoadAborted(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def make_prompts(n: int, input_len: int, vocab: int | Sequence[int], seed: int, low: int = 3) -> list[list[int]]:
    """Seeded token-id prompts of exactly input_len tokens each, drawn from `vocab`: the ids a prompt may use
    (bench.engine.launch.prompt_ids: no special id), or a vocab size whose special ids all lie below `low`."""
    ids = range(low, vocab) if isinstance(vocab, int) else vocab
    rng = random.Random(seed)
    return [[rng.choice(ids) for _ in range(input_len)] for _ in range(n)]


def make_prompt(
    input_len: int, vocab: int | Sequence[int], seed: str, low: int = 3, style: str = "uniform"
) -> list[int]:
    """One token-id prompt of exactly input_len ids from `vocab`, drawn from a generator seeded by `seed`: a
    string naming the prompt (run salt, point, trial, phase, index: bench.load.prompts), so that no two prompts of a
    results directory share a block that vLLM's prefix cache could hit, and a run is reproduced exactly from
    its manifest's salt.

    `style` (`[run] prompt_ids`): "uniform" draws every id independently; "consecutive" takes input_len
    consecutive ids of `vocab` (wrapping round) from a start drawn the same way: the sequence vLLM's random
    dataset builds (offset + index + arange(input_len) over its allowed ids) before its decode and re-encode.
    Two consecutive prompts are the same only when their starts collide (about n^2 / (2 x vocab) pairs among n
    prompts); the prefix-cache check flags it if it happens."""
    ids = range(low, vocab) if isinstance(vocab, int) else vocab
    rng = random.Random(seed)
    if style == "uniform":
        return rng.choices(ids, k=input_len)
    if style == "consecutive":
        start = rng.randrange(len(ids))
        return [ids[(start + i) % len(ids)] for i in range(input_len)]
    raise ValueError(f"prompt style {style!r}: uniform or consecutive")


@dataclass(frozen=True)
class TextSettings:
    """What every request of a text workload carries besides its messages."""

    sampling: Sampling = field(default_factory=Sampling)
    chat_template_kwargs: dict | None = None
    workload: str | None = None


@dataclass
class _Load:
    """One load run: where its requests go, where records land, what is in flight, and when a token last
    arrived (the stall watchdog's clock)."""

    base_url: str
    model: str
    timeout_s: float  # per request
    records: list[RequestRecord]
    last_token: float = field(default_factory=time.perf_counter)
    in_flight: int = 0
    # every chunk's arrival and tokens, in arrival order: what a closed loop's live precision is computed from
    # (cheap: no walk over the records while streams are being read)
    token_times: list[float] = field(default_factory=list)
    token_counts: list[int] = field(default_factory=list)

    def tick(self) -> None:
        self.last_token = time.perf_counter()


async def _one(session: aiohttp.ClientSession, load: _Load, rec: RequestRecord, path: str, body: dict) -> str:
    """Send one streamed request, fill its record; returns the answer's text (chat; "" otherwise)."""
    if not load.in_flight:  # a busy period starts: the stall clock counts from here
        load.tick()
    load.in_flight += 1
    rec.send_time = time.perf_counter()
    text = ""
    try:
        timeout = aiohttp.ClientTimeout(total=load.timeout_s)
        async with session.post(load.base_url + path, json=body, timeout=timeout) as resp:
            if resp.status != 200:
                rec.status, rec.error = "error", f"HTTP {resp.status}: {(await resp.text())[:300]}"
                return text
            finished, completed, text = await _read_stream(resp, rec, load, "messages" in body)
        rec.end_time = time.perf_counter()
        rec.output_tokens = completed
        rec.status, rec.error = _verdict(rec, finished, completed, bool(body.get("ignore_eos")))
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        rec.end_time = time.perf_counter()
        rec.status, rec.error = "error", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        load.in_flight -= 1
        load.tick()
    return text


async def _read_stream(
    resp: aiohttp.ClientResponse, rec: RequestRecord, load: _Load, chat: bool
) -> tuple[bool, int, str]:
    """Record each chunk that carries new tokens (arrival time, token count from the usage stats) until [DONE].
    Returns (ended with [DONE], completion tokens, the answer's text when `chat`)."""
    completed = 0
    buffer = b""
    parts: list[str] = []
    async for data in resp.content.iter_any():  # whole network reads; events split here (cheaper)
        now = time.perf_counter()
        buffer += data
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            payload = event.strip()[5:].strip() if event.strip().startswith(b"data:") else b""
            if not payload:
                continue
            if payload == b"[DONE]":
                return True, completed, "".join(parts)
            chunk = json.loads(payload)
            usage = chunk.get("usage") or {}
            done = usage.get("completion_tokens")
            if done is not None and done > completed:
                rec.chunk_times.append(now)
                rec.chunk_tokens.append(done - completed)
                load.token_times.append(now)
                load.token_counts.append(done - completed)
                completed = done
                load.tick()
            rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
            _read_choice(chunk, rec, parts if chat else None)
    return False, completed, "".join(parts)


def _read_choice(chunk: dict, rec: RequestRecord, parts: list[str] | None) -> None:
    """The answer's text (chat), the finish reason, and the per-request speculative numbers of the last chunk."""
    for choice in chunk.get("choices") or ():
        if parts is not None:
            content = (choice.get("delta") or {}).get("content")
            if content:
                parts.append(content)
        rec.finish_reason = choice.get("finish_reason") or rec.finish_reason
    spec = (chunk.get("metrics") or {}).get("speculative_decoding")
    if spec:
        rec.spec_steps = spec.get("num_spec_steps")
        rec.spec_draft_tokens = spec.get("num_draft_tokens")
        rec.spec_accepted_tokens = spec.get("num_accepted_draft_tokens")
        rec.spec_histogram = spec.get("acceptance_histogram")


def _verdict(rec: RequestRecord, finished: bool, completed: int, ignore_eos: bool) -> tuple[str, str | None]:
    """A stream is ok only when complete: it ended with [DONE], carried usage, the server counted the prompt we
    sent (token-id prompts), and (under ignore_eos) produced every asked token. Anything else is a truncated or
    unmeasurable request, never a short success."""
    if not finished:
        return "error", f"truncated: the stream ended before [DONE] after {completed} tokens"
    if rec.prompt_tokens is None:
        return "error", "the stream carried no usage: token counts unknown"
    if rec.prompt_len is not None and rec.prompt_tokens != rec.prompt_len:
        return "error", f"server counted {rec.prompt_tokens} prompt tokens, sent {rec.prompt_len}"
    if ignore_eos and rec.max_tokens is not None and completed < rec.max_tokens:
        return "error", f"truncated: {completed} of {rec.max_tokens} tokens under ignore_eos"
    return "ok", None


def completion_body(model: str, prompt: list[int], max_tokens: int) -> dict:
    """A random-id request: greedy, EOS ignored, so it produces exactly max_tokens tokens."""
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": STREAM_OPTIONS,
    }


def chat_body(model: str, messages: list[dict], settings: TextSettings, max_tokens: int | None) -> dict:
    """A text request: only the sampling fields the workload sets (the rest are the server's defaults)."""
    body: dict = {"model": model, "messages": messages, **settings.sampling.request_fields()}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if settings.chat_template_kwargs:
        body["chat_template_kwargs"] = settings.chat_template_kwargs
    return {**body, "stream": True, "stream_options": STREAM_OPTIONS}


@dataclass(frozen=True)
class Phase:
    """Units sent under one schedule: random prompts, or conversations."""

    name: str  # "warmup" or "measure"
    units: Sequence[list[int] | Conversation]
    plan: Schedule


async def _run_phase(load: _Load, phase: Phase, send_unit) -> None:
    """Send the phase's units by its schedule; stamp each unit's records with when it was due, arrived, started."""
    by_unit: dict[int, list[RequestRecord]] = {}
    connector = aiohttp.TCPConnector(limit=phase.plan.max_concurrency or 0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(i: int) -> None:
            by_unit[i] = []
            await send_unit(session, phase, i, by_unit[i])

        paced = await pace(phase.plan, send)
    for p in paced:
        for rec in by_unit.get(p.index, ()):
            rec.due_s, rec.arrival_time, rec.start_time = p.due_s, p.arrival_time, p.start_time


async def _watch(load: _Load, stall_s: float, is_alive: Callable[[], None], done: asyncio.Event) -> None:
    while not done.is_set():
        await asyncio.sleep(0.5)
        is_alive()  # raises when the server died
        if load.in_flight and time.perf_counter() - load.last_token > stall_s:
            raise LoadAborted("hang", f"no streamed token for {stall_s:.0f} s")


async def _drive(
    load: _Load,
    phases: list[Phase],
    send_unit,
    stall_s: float,
    check_alive: Callable[[], None],
    on_measure_start: Callable[[], None],
) -> None:
    async def run_phases() -> None:
        for phase in phases:
            if phase.name == "measure":  # the callback may block (it scrapes /metrics): off the event loop
                await asyncio.get_running_loop().run_in_executor(None, on_measure_start)
            if phase.units:
                await _run_phase(load, phase, send_unit)

    await _guarded(load, run_phases(), stall_s, check_alive)


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
    arrival: Arrival | None = None,
    seed: int = 0,
    workload: str | None = None,
    first_index: int = 0,
) -> list[RequestRecord]:
    """Random token-id prompts: warmup (all at once, `concurrency` in flight), then the measured ones by
    `arrival` (default: fixed `concurrency`); returns every record (warmup included, marked by phase).
    `first_index`: the first record's index (a trial in several waves keeps its indices distinct).

    Raises LoadAborted on a hang, or whatever check_alive raises when the server dies; `records`, when given,
    keeps what was recorded up to then.
    """
    records = [] if records is None else records
    load = _Load(base_url, model, timeout_s, records)
    warmup, measure = prompts[:warmup_count], prompts[warmup_count:]
    arrival = arrival or Arrival.fixed_concurrency(concurrency)
    phases = [
        Phase("warmup", warmup, schedule(Arrival.fixed_concurrency(concurrency), len(warmup), seed)),
        Phase("measure", measure, schedule(arrival, len(measure), seed)),
    ]

    async def send_unit(session, phase: Phase, i: int, out: list[RequestRecord]) -> None:
        index = first_index + i + (len(warmup) if phase.name == "measure" else 0)
        prompt = phase.units[i]
        assert isinstance(prompt, list)
        rec = RequestRecord(index, phase.name, len(prompt), max_tokens, send_time=0.0, workload=workload)
        rec.category = RANDOM_CATEGORY
        records.append(rec)
        out.append(rec)
        await _one(session, load, rec, "/v1/completions", completion_body(model, prompt, max_tokens))

    asyncio.run(_drive(load, phases, send_unit, stall_s, check_alive, on_measure_start))
    return records


def run_conversations(
    base_url: str,
    model: str,
    *,
    warmup: list[Conversation],
    measured: list[Conversation],
    arrival: Arrival,
    seed: int,
    settings: TextSettings,
    stall_s: float,
    timeout_s: float,
    check_alive: Callable[[], None],
    on_measure_start: Callable[[], None] = lambda: None,
    records: list[RequestRecord] | None = None,
) -> list[RequestRecord]:
    """Text conversations on the chat API: warmup (unpaced, at the arrival's cap), then `on_measure_start()`, then
    the measured conversations by `arrival`, in one window. One schedule slot is one whole conversation; each turn
    is one request and one record. A failed turn ends its conversation (the later turns would follow an answer that
    never came). Raises as run_load."""
    records = [] if records is None else records
    load = _Load(base_url, model, timeout_s, records)
    cap = Arrival.fixed_concurrency(arrival.max_concurrency or max(len(warmup), 1))
    phases = [Phase("warmup", warmup, schedule(cap, len(warmup), seed))]
    phases.append(Phase("measure", measured, schedule(arrival, len(measured), seed)))

    async def send_unit(session, phase: Phase, i: int, out: list[RequestRecord]) -> None:
        conv = phase.units[i]
        assert isinstance(conv, Conversation)
        answers: list[str] = []
        for turn in range(len(conv.turns)):
            max_tokens = conv.output_tokens or settings.sampling.max_tokens  # the row's own length wins
            rec = RequestRecord(len(records), phase.name, None, max_tokens, send_time=0.0, workload=settings.workload)
            rec.category, rec.conversation, rec.turn = conv.category, conv.id, turn
            records.append(rec)
            out.append(rec)
            body = chat_body(model, conv.messages(answers), settings, max_tokens)
            answers.append(await _one(session, load, rec, "/v1/chat/completions", body))
            if rec.status != "ok":
                break

    asyncio.run(_drive(load, phases, send_unit, stall_s, check_alive, on_measure_start))
    return records


@dataclass(frozen=True)
class ClosedLoop:
    """A closed loop at constant concurrency: `concurrency` requests in flight, a fresh prompt sent as each one
    finishes. `prompt(phase, i)` makes request i's prompt of a phase ("warmup" or "measure"); the warm-up sends
    `warmup` requests; the measured phase sends while `more(i, load)` says so (i: the requests sent so far in it;
    `load` has the chunk arrivals so far, for a precision-driven stop). `stagger(warmup_records)` gives each
    worker's delay before its first measured send (worker j waits offsets[j] s), so that the requests' phases are
    spread over one request's lifetime instead of moving in lockstep (docs/measurement.md)."""

    concurrency: int
    max_tokens: int
    warmup: int
    prompt: Callable[[str, int], list[int]]
    more: Callable[[int, _Load], bool]
    stagger: Callable[[list[RequestRecord]], Sequence[float]] = lambda _warmup: ()


async def _loop(load: _Load, loop: ClosedLoop, phase: str, send_unit, offsets: Sequence[float] = ()) -> None:
    """`loop.concurrency` workers, each sending one request after another until the phase is over; worker j
    sends its first request offsets[j] s after the phase starts (at once without one)."""
    sent = 0

    def next_index() -> int | None:
        nonlocal sent
        go = sent < loop.warmup if phase == "warmup" else loop.more(sent, load)
        if not go:
            return None
        sent += 1
        return sent - 1

    connector = aiohttp.TCPConnector(limit=loop.concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(j: int) -> None:
            if j < len(offsets) and offsets[j] > 0:
                await asyncio.sleep(offsets[j])
            while (i := next_index()) is not None:
                await send_unit(session, phase, i, j)

        async with asyncio.TaskGroup() as group:
            for j in range(loop.concurrency):
                group.create_task(worker(j))


def run_closed_loop(
    base_url: str,
    model: str,
    loop: ClosedLoop,
    *,
    stall_s: float,
    timeout_s: float,
    check_alive: Callable[[], None],
    on_measure_start: Callable[[], None] = lambda: None,
    records: list[RequestRecord] | None = None,
    workload: str | None = None,
) -> list[RequestRecord]:
    """Random token-id prompts in a closed loop (ClosedLoop): the warm-up, then `on_measure_start()`, then the
    measured phase; returns every record (warm-up included, marked by phase). Raises as run_load."""
    records = [] if records is None else records
    load = _Load(base_url, model, timeout_s, records)

    async def send_unit(session, phase: str, i: int, slot: int) -> None:
        prompt = loop.prompt(phase, i)
        rec = RequestRecord(len(records), phase, len(prompt), loop.max_tokens, send_time=0.0, workload=workload)
        rec.category, rec.slot = RANDOM_CATEGORY, slot
        records.append(rec)
        await _one(session, load, rec, "/v1/completions", completion_body(model, prompt, loop.max_tokens))
        rec.arrival_time = rec.start_time = rec.send_time  # closed loop: due, arrived and started when sent

    async def phases() -> None:
        if loop.warmup:
            await _loop(load, loop, "warmup", send_unit)
        await asyncio.get_running_loop().run_in_executor(None, on_measure_start)  # it scrapes /metrics
        load.token_times.clear()
        load.token_counts.clear()
        offsets = loop.stagger([r for r in records if r.phase == "warmup"])
        await _loop(load, loop, "measure", send_unit, offsets)

    asyncio.run(_guarded(load, phases(), stall_s, check_alive))
    return records


async def _guarded(load: _Load, work, stall_s: float, check_alive: Callable[[], None]) -> None:
    """Run `work` under the stall watchdog: whichever ends first; a watchdog error cancels the work."""
    done = asyncio.Event()

    async def run() -> None:
        try:
            await work
        finally:
            done.set()

    main = asyncio.ensure_future(run())
    watch = asyncio.ensure_future(_watch(load, stall_s, check_alive, done))
    finished, _ = await asyncio.wait({main, watch}, return_when=asyncio.FIRST_COMPLETED)
    if watch in finished and (error := watch.exception()) is not None:
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
        raise error
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    main.result()
