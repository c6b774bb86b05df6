"""Load a text dataset for a workload: read the source (sources.py, hf.py), select the asked part, record where it
came from, and keep the normalised text under the user's cache folder keyed by a hash of source, selection and
format, so a result can name the exact text it sent.

Cache folder: $BENCH_DATASETS_CACHE, else $XDG_CACHE_HOME/bench/datasets, else ~/.cache/bench/datasets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from pathlib import Path

from pydantic import ValidationError

from bench.core.errors import BenchError
from bench.core.files import atomic_write_json
from bench.workloads import sources, spec
from bench.workloads.conversation import Conversation, Dataset, Provenance

log = logging.getLogger(__name__)
CACHE_ENV = "BENCH_DATASETS_CACHE"
# Bumped when the normalised form changes, so older cache entries are not read as the new form.
CACHE_FORMAT = 1


def cache_root() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "bench" / "datasets"


def load_dataset(source: spec.DatasetSource, *, base_dir: Path | None = None, cache: Path | None = None) -> Dataset:
    """The selected conversations of `source` with their provenance. Relative paths are taken from `base_dir`
    (a profile's folder; default: the working directory). Every problem is one BenchError; the cache entry is
    written whole (atomic) or not at all."""
    raw = _read(source, Path.cwd() if base_dir is None else Path(base_dir))
    convs = select(raw.conversations, source, raw.known_categories, raw.source)
    selection = _selection(source, raw.path)
    source_sha = hashlib.sha256(raw.data).hexdigest()
    key = hashlib.sha256(json.dumps([CACHE_FORMAT, selection, source_sha], sort_keys=True).encode()).hexdigest()
    cache_file = (cache_root() if cache is None else Path(cache)) / f"{source.kind}-{key[:16]}.json"
    text = [c.model_dump(mode="json") for c in convs]
    provenance = Provenance(
        kind=source.kind,
        source=raw.source,
        path=str(raw.path),
        package=raw.package,
        version=raw.version,
        sha256=source_sha,
        selection=selection,
        count=len(convs),
        turns=sum(len(c.turns) for c in convs),
        categories=dict(sorted(Counter(c.category for c in convs).items())),
        skipped=raw.skipped,
        text_sha256=hashlib.sha256(json.dumps(text, sort_keys=True).encode()).hexdigest(),
        cache_file=str(cache_file),
    )
    dataset = Dataset(conversations=tuple(convs), provenance=provenance)
    _write_cache(cache_file, dataset)
    return dataset


def _read(source: spec.DatasetSource, base: Path) -> sources.RawSource:
    if isinstance(source, spec.HumanEval):
        raw = sources.humaneval(source)
    elif isinstance(source, spec.MTBench):
        raw = sources.mt_bench(source)
    elif isinstance(source, spec.Jsonl):
        raw = sources.jsonl(source, base)
    elif isinstance(source, spec.SpecBench):
        raw = sources.spec_bench(source, base)
    elif isinstance(source, spec.SpeedBench):
        raw = sources.speed_bench(source, base)
    elif isinstance(source, spec.ShareGPT):
        raw = sources.sharegpt(source, base)
    else:
        from bench.workloads.hf import huggingface

        raw = huggingface(source)
    if not raw.conversations:
        raise BenchError(f"{source.kind}: {raw.source}: holds no conversation")
    return raw


def select(
    convs: list[Conversation], source: spec.Selection, known: list[str] | None, where: str
) -> list[Conversation]:
    """Category filter (unknown categories are errors that list the known ones), then the first max_turns turns
    of each conversation, then the first max_per_category of each category, in source order."""
    known = sorted(set(known or ()) | {c.category for c in convs})
    if source.categories is not None:
        unknown = [c for c in source.categories if c not in known]
        if unknown:
            raise BenchError(
                f"{where}: unknown categor{'ies' if len(unknown) > 1 else 'y'} "
                f"{', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            )
        convs = [c for c in convs if c.category in source.categories]
    if source.max_turns is not None:
        convs = [c.model_copy(update={"turns": c.turns[: source.max_turns]}) for c in convs]
    if source.max_per_category is not None:
        seen: Counter[str] = Counter()
        kept = []
        for c in convs:
            seen[c.category] += 1
            if seen[c.category] <= source.max_per_category:
                kept.append(c)
        convs = kept
    if not convs:
        raise BenchError(f"{where}: nothing left after the selection")
    return convs


def _selection(source: spec.DatasetSource, resolved: Path) -> dict:
    """The spec as asked, with a user path made absolute (what the cache key and the results record)."""
    data = source.model_dump(mode="json")
    if "path" in data:
        data["path"] = str(resolved)
    return data


def _write_cache(path: Path, dataset: Dataset) -> None:
    """Write the normalised text once; an entry that is already there with the same text is left alone, an
    unreadable one is replaced. A cache that cannot be written only costs the copy: the run goes on."""
    body = {"cache_format": CACHE_FORMAT, **dataset.model_dump(mode="json")}
    try:
        if path.exists() and json.loads(path.read_text()) == body:
            return
    except (OSError, ValueError):
        pass
    try:
        atomic_write_json(path, body)
    except OSError as exc:
        log.warning("cannot write the dataset cache %s: %s", path, exc)


def read_cached(path: Path) -> Dataset:
    """A dataset from its cache entry (what a result's provenance.cache_file names)."""
    try:
        body = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: cannot read the cached dataset ({exc})") from None
    if body.pop("cache_format", None) != CACHE_FORMAT:
        raise BenchError(f"{path}: cached dataset of another format; load the source again")
    try:
        return Dataset.model_validate(body)
    except ValidationError as exc:
        raise BenchError(f"{path}: not a cached dataset ({exc.errors()[0]['msg']})") from None
