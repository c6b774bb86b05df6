"""Source rows to conversations: the one place that decides what a `prompt`, a `turns` list, a `messages` list or a
ShareGPT `conversations` list means, so every source kind reads text the same way. Every error names the file and
row (`where`) and what was expected there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from bench.core.errors import BenchError
from bench.workloads.conversation import DEFAULT_CATEGORY, Conversation, Message

SHAREGPT_USER = {"human", "user"}
SHAREGPT_SYSTEM = {"system"}


def read_source(path: Path, what: str) -> bytes:
    """The bytes of a user's file, or a BenchError that names it."""
    if not path.exists():
        raise BenchError(f"{what}: {path}: no such file")
    if not path.is_file():
        raise BenchError(f"{what}: {path}: not a file")
    return path.read_bytes()


def jsonl_rows(data: bytes, where: str) -> Iterator[tuple[str, dict]]:
    """(`FILE:LINE`, row) for every non-blank line; a line that is not a JSON object is an error naming it."""
    text = _utf8(data, where)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        at = f"{where}:{lineno}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchError(f"{at}: not valid JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise BenchError(f"{at}: a row must be a JSON object, got {type(row).__name__}")
        yield at, row


def json_document(data: bytes, where: str) -> object:
    try:
        return json.loads(_utf8(data, where))
    except json.JSONDecodeError as exc:
        raise BenchError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def _utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BenchError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def field(row: dict, names: tuple[str, ...], at: str) -> tuple[str, object]:
    """The first of `names` the row has, or an error naming the row and the fields it may use."""
    for name in names:
        if name in row:
            return name, row[name]
    wanted = " or ".join(f"'{n}'" for n in names)
    raise BenchError(f"{at}: no {wanted} field (the row has: {', '.join(sorted(row)) or 'nothing'})")


def text_value(value: object, at: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    """(context, turns) from one field's value, by its shape:
    - a string: one turn;
    - a list of strings: one turn each (multi-turn replay, MT-Bench / Spec-Bench `turns`);
    - a list of {role, content}: chat messages, sent as given up to the last user message, which is the turn
      (a trailing recorded answer is left out: the model answers itself);
    - a list of {from, value}: a ShareGPT conversation, every human message a turn (replay), system as context.
    """
    if isinstance(value, str):
        return (), (_non_empty(value, at),)
    if not isinstance(value, list) or not value:
        raise BenchError(f"{at}: expected text, a list of turns or a list of messages, got {_shape(value)}")
    if all(isinstance(v, str) for v in value):
        return (), tuple(_non_empty(v, at) for v in value)
    if all(isinstance(v, dict) and "role" in v for v in value):
        return _chat_messages(value, at)
    if all(isinstance(v, dict) and "from" in v for v in value):
        return sharegpt_turns(value, at)
    raise BenchError(f"{at}: a list must hold only strings, only {{role, content}} or only {{from, value}} items")


def _chat_messages(messages: list[dict], at: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    parsed = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("system", "user", "assistant"):
            raise BenchError(f"{at}: message {i}: role must be system, user or assistant, got {role!r}")
        if not isinstance(content, str):
            raise BenchError(f"{at}: message {i}: content must be text, got {_shape(content)}")
        parsed.append(Message(role=role, content=content))
    while parsed and parsed[-1].role == "assistant":
        parsed.pop()
    if not parsed or parsed[-1].role != "user":
        raise BenchError(f"{at}: the messages hold no user message to answer")
    return tuple(parsed[:-1]), (_non_empty(parsed[-1].content, at),)


def sharegpt_turns(messages: list, at: str) -> tuple[tuple[Message, ...], tuple[str, ...]]:
    """ShareGPT `{from, value}` messages: human turns replayed, system kept as context, the recorded answers
    (gpt, chatgpt, bard, ...) left out. No human turn: ((), ())."""
    context: list[Message] = []
    turns: list[str] = []
    for i, m in enumerate(messages):
        speaker, text = (m.get("from"), m.get("value")) if isinstance(m, dict) else (None, None)
        if not isinstance(speaker, str) or not isinstance(text, str):
            raise BenchError(f"{at}: message {i}: expected {{from, value}} with text, got {_shape(m)}")
        if speaker.lower() in SHAREGPT_SYSTEM and not turns:
            context.append(Message(role="system", content=text))
        elif speaker.lower() in SHAREGPT_USER and text.strip():
            turns.append(text)
    return tuple(context), tuple(turns)


def category_of(row: dict, at: str, name: str = "category", required: bool = False) -> str:
    value = row.get(name)
    if value is None:
        if required:
            raise BenchError(f"{at}: no '{name}' field")
        return DEFAULT_CATEGORY
    if not isinstance(value, str) or not value.strip():
        raise BenchError(f"{at}: '{name}' must be non-empty text, got {_shape(value)}")
    return value.strip()


def output_tokens_of(row: dict, at: str) -> int | None:
    value = row.get("output_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BenchError(f"{at}: 'output_tokens' must be a whole number >= 1, got {value!r}")
    return value


def conversation(
    row_id: object,
    at: str,
    context: tuple[Message, ...],
    turns: tuple[str, ...],
    category: str,
    output_tokens: int | None = None,
) -> Conversation:
    if not turns:
        raise BenchError(f"{at}: no user turn")
    return Conversation(id=str(row_id), category=category, turns=turns, context=context, output_tokens=output_tokens)


def _non_empty(text: str, at: str) -> str:
    if not text.strip():
        raise BenchError(f"{at}: an empty turn")
    return text


def _shape(value: object) -> str:
    return "an empty list" if value == [] else type(value).__name__
