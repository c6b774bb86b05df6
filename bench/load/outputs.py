"""Greedy outputs on fixed prompts (`sweep --check-outputs N`, `ab --check-outputs N`): does a change leave what the
server generates as it was?

After a server starts and before its points, N prompts are sent one at a time, greedy (temperature 0) with EOS
ignored, and the token ids the server returns (`return_token_ids`, vLLM's completions API) are kept
(bench.run.executor writes OUT/outputs/<engine id>.json; bench.verdicts.outputs compares runs and sides). A prompt
is named by its length and index alone (`outputs/<input_len>/<i>`), never by the run's salt, so every run, round,
side and start of one model sends the same ones. One request at a time, so that the batch a token was computed in is
the same in every run: a change that only reorders floating-point sums (another kernel, another split) can still
flip a near-tied argmax, which is why the comparison also states how far two runs of the same side agree.
"""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Sequence
from dataclasses import dataclass

from bench.load import http_client
from bench.load.loadgen import completion_body, make_prompt

OUTPUT_TOKENS = 32  # tokens generated per prompt, unless the engine's points generate fewer
FALLBACK_INPUT_LEN = 32  # prompt length when the engine serves no random-id shape (text workloads only)


@dataclass(frozen=True)
class GreedyRun:
    """What was sent and what came back; `error` set when a request failed (the outputs then stop there)."""

    input_len: int
    max_tokens: int
    prompt_sha256: list[str]  # of each prompt's ids: two files compare only prompts that were the same
    outputs: list[list[int]]  # the generated token ids, a list per prompt, in order
    error: str | None = None


def fixed_prompts(n: int, input_len: int, vocab: Sequence[int]) -> list[list[int]]:
    """The N prompts every run of a model sends (named by length and index, not by salt)."""
    return [make_prompt(input_len, vocab, f"outputs/{input_len}/{i}") for i in range(n)]


def prompt_digest(prompt: Sequence[int]) -> str:
    return hashlib.sha256(",".join(map(str, prompt)).encode()).hexdigest()[:16]


def greedy_body(model: str, prompt: Sequence[int], max_tokens: int) -> dict:
    """The load's random-id request (greedy, EOS ignored), not streamed, with the generated ids in the answer."""
    body = completion_body(model, list(prompt), max_tokens)
    del body["stream_options"]  # vLLM refuses stream options on a request that does not stream
    return {**body, "stream": False, "return_token_ids": True}


def token_ids(response: bytes) -> list[int]:
    """The generated ids of a completions response; ValueError when the server sent none (a vLLM without
    `return_token_ids`, or not vLLM)."""
    body = json.loads(response)
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    ids = first.get("token_ids") if isinstance(first, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ValueError("the response has no choices[0].token_ids (does this server support return_token_ids?)")
    return ids


def greedy_outputs(
    base_url: str, model: str, prompts: Sequence[Sequence[int]], max_tokens: int, timeout_s: float
) -> GreedyRun:
    """Send `prompts` one at a time, each given `timeout_s`; the first failure (no answer, an HTTP error, a connection
    cut mid-body, a body without token ids) ends the run and is kept in `error`, never raised."""
    input_len = len(prompts[0]) if prompts else 0
    run = GreedyRun(input_len, max_tokens, [prompt_digest(p) for p in prompts], [])
    for i, prompt in enumerate(prompts):
        try:
            ids = token_ids(
                http_client.post(base_url + "/v1/completions", greedy_body(model, prompt, max_tokens), timeout_s)
            )
        except (OSError, ValueError, http.client.HTTPException) as exc:
            return GreedyRun(input_len, max_tokens, run.prompt_sha256, run.outputs, f"prompt {i}: {exc}"[:500])
        run.outputs.append(ids)
    return run
