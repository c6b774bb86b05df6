"""One trial's load of a random token-id point, in waves: warm-up waves until the output throughput is steady
(`[run] warmup_steady`), then measured waves of fresh prompts until the measured window lasts `[run]
min_window_s`. With neither set it is the one load call it always was: the point's warm-up prompts, then its
measured ones.

Why: a server's first requests run slower (allocator, caches, thread pools settling), and one fixed warm-up of a
couple of requests may end before that is over; and a short measured window is dominated by its ramp-up and
drain and by whatever else the host did in that second. Both add to the spread between server starts
(reports/examples/cpu-noise-sources measures by how much). A point that never got steady says so in its record
(`warmup.steady` false); it is not passed off as steady.

Every wave gets fresh prompts (their own seed): a repeated prompt would hit vLLM's prefix cache and run faster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.loadgen import RequestRecord, make_prompts
from bench.profile import Run, Shape

if TYPE_CHECKING:
    from bench.plan import Point

WAVE_SEED = 10_000_000  # seed step between waves (trials differ by 1000, shapes by input_len)
MAX_WAVES = 10_000  # a window that does not grow (every request failing at once) stops here


def span_s(records: Sequence[RequestRecord]) -> float | None:
    """Seconds from the first send to the last end (None: nothing ended)."""
    ends = [r.end_time for r in records if r.end_time is not None]
    return max(ends) - min(r.send_time for r in records) if ends else None


def wave_throughput(records: Sequence[RequestRecord]) -> float | None:
    """Output tokens per second of one wave: its completed requests' tokens over its span (None: unknown)."""
    ok = [r for r in records if r.status == "ok" and r.output_tokens]
    span = span_s(ok)
    return sum(r.output_tokens or 0 for r in ok) / span if ok and span else None


def is_steady(previous: float | None, current: float | None, tolerance: float) -> bool:
    """Two successive waves agree: |current - previous| <= tolerance x previous (unknown never agrees)."""
    if previous is None or current is None or previous <= 0:
        return False
    return abs(current - previous) <= tolerance * previous


def warm_up(send_wave: Callable[[int], Sequence[RequestRecord]], tolerance: float, max_waves: int) -> dict:
    """Warm-up waves 0, 1, ... until two successive ones agree within `tolerance`, at most `max_waves`.
    The record: each wave's tok/s and whether it got steady (false when the cap ended it)."""
    rates = [wave_throughput(send_wave(0))]
    while not (steady := len(rates) > 1 and is_steady(rates[-2], rates[-1], tolerance)) and len(rates) < max_waves:
        rates.append(wave_throughput(send_wave(len(rates))))
    return {"waves_tok_s": rates, "steady": steady, "tolerance": tolerance, "max_waves": max_waves}


def measure_window(send_wave: Callable[[int], Sequence[RequestRecord]], min_window_s: float) -> dict:
    """Measured waves 0, 1, ... until the window (first send to last end over all of them) lasts
    `min_window_s`; one wave when it is 0. Stops early when a wave completes nothing (more would not help)."""
    measured: list[RequestRecord] = []
    waves = 0
    while True:
        wave = list(send_wave(waves))
        waves += 1
        measured += wave
        window = span_s(measured)
        if window is None or window >= min_window_s or wave_throughput(wave) is None or waves >= MAX_WAVES:
            return {"waves": waves, "window_s": window, "min_window_s": min_window_s}


@dataclass(frozen=True)
class RandomLoad:
    """What every wave of one trial shares. `send` is bench.loadgen.run_load (the executor passes its own name,
    so tests that replace it there replace it here); `server` has a base_url and check_alive()."""

    send: Callable[..., Any]
    server: Any
    model: str
    vocab: Sequence[int]
    point: Point
    run: Run
    seed: int  # of the trial's first wave
    records: list[RequestRecord]

    @property
    def shape(self) -> Shape:
        assert self.point.shape is not None, "waves are for random token-id points"
        return self.point.shape

    def wave(self, prompts: list[list[int]], warmup: int, seed: int, on_measure_start=lambda: None) -> list:
        """Send `prompts` (the first `warmup` of them as warm-up); the records it added."""
        first = len(self.records)
        self.send(
            self.server.base_url,
            self.model,
            prompts=prompts,
            warmup_count=warmup,
            max_tokens=self.shape.output_len,
            concurrency=self.shape.concurrency,
            stall_s=self.run.stall_timeout_s,
            timeout_s=self.run.request_timeout_s,
            check_alive=self.server.check_alive,
            on_measure_start=on_measure_start,
            records=self.records,
            arrival=self.point.arrival,
            seed=seed,
            workload=self.point.workload.id,
            first_index=first,
        )
        return self.records[first:]

    def fresh(self, n: int, seed: int) -> list[list[int]]:
        return make_prompts(n, self.shape.input_len, self.vocab, seed=seed)


def random_trial(load: RandomLoad, warmup: int, on_measure_start: Callable[[], None]) -> dict:
    """The trial's waves; returns what the point's record keeps of them: `warmup` (the warm-up waves' tok/s,
    steady or not; only when there was a warm-up) and `window` (measured waves, window length)."""
    run, num_prompts = load.run, load.point.num_prompts
    prompts = load.fresh(warmup + num_prompts, load.seed)  # the prompts a single-call trial always used
    out: dict = {}
    if warmup and run.warmup_steady is not None:
        out["warmup"] = warm_up(
            lambda w: load.wave(
                prompts[:warmup] if w == 0 else load.fresh(warmup, _seed(load, w, 1)), warmup, _seed(load, w, 1)
            ),
            run.warmup_steady,
            run.warmup_max_waves,
        )
        carried = 0
    else:  # the warm-up rides in the first measured wave's call, as before
        carried = warmup

    def measured_wave(w: int) -> list[RequestRecord]:
        if w > 0:  # the spec-decode counters were taken once, before wave 0: the window spans every wave
            return load.wave(load.fresh(num_prompts, _seed(load, w, 0)), 0, _seed(load, w, 0))
        sent = load.wave(prompts[warmup - carried :], carried, load.seed, on_measure_start)
        if carried:
            out["warmup"] = {"waves_tok_s": [wave_throughput([r for r in sent if r.phase == "warmup"])], "steady": None}
        return [r for r in sent if r.phase == "measure"]

    out["window"] = measure_window(measured_wave, run.min_window_s)
    return out


def _seed(load: RandomLoad, wave: int, warmup: int) -> int:
    """Wave `wave`'s prompt and schedule seed (`warmup` 1: a warm-up wave), apart from every other wave's."""
    return load.seed + (WAVE_SEED * wave + warmup * WAVE_SEED // 2 if wave else 0)
