"""Hugging Face datasets, from the local cache only: the `datasets` library in offline mode, so a dataset that is
not cached is a clear error that says how to cache it, never a download in the middle of a benchmark.
`datasets` is optional (not a dependency of the suite): without it, a clear error too.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from bench.core.errors import BenchError
from bench.workloads import rows, spec
from bench.workloads.conversation import DEFAULT_CATEGORY
from bench.workloads.sources import RawSource

# Tried in this order when the spec names no text_field.
TEXT_FIELDS = ("messages", "conversations", "turns", "prompt", "question", "instruction", "text")
_OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


@contextlib.contextmanager
def offline_datasets() -> Iterator[ModuleType]:
    """The `datasets` module with hub access off. The library reads the switch when it is imported, so the
    environment is set first, and its and huggingface_hub's constants are switched too in case it was imported
    before; everything is put back afterwards."""
    saved_env = {k: os.environ.get(k) for k in _OFFLINE_ENV}
    os.environ.update(dict.fromkeys(_OFFLINE_ENV, "1"))
    patched: list[tuple[object, str, object]] = []
    try:
        try:
            datasets = importlib.import_module("datasets")
        except ImportError:
            raise BenchError(
                "hf workloads need the Hugging Face `datasets` package, which is not installed: "
                "pip install datasets (into the suite's venv; or pip install -e .[hf])"
            ) from None
        for module_name, attr in (
            ("datasets.config", "HF_HUB_OFFLINE"),
            ("datasets.config", "HF_DATASETS_OFFLINE"),
            ("huggingface_hub.constants", "HF_HUB_OFFLINE"),
        ):
            module = importlib.import_module(module_name)
            if hasattr(module, attr):
                patched.append((module, attr, getattr(module, attr)))
                setattr(module, attr, True)
        yield datasets
    finally:
        for owner, attr, value in reversed(patched):
            setattr(owner, attr, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def huggingface(s: spec.HuggingFace) -> RawSource:
    label = f"hf:{s.name}" + (f" config={s.config}" if s.config else "") + f" split={s.split}"
    with offline_datasets() as datasets:
        try:
            ds = datasets.load_dataset(s.name, s.config, split=s.split)
        except Exception as exc:  # datasets raises many types for "not cached", "no such split", ...
            raise BenchError(_not_cached(s, datasets, exc)) from None
    columns = list(ds.column_names)
    text_field = s.text_field or next((c for c in TEXT_FIELDS if c in columns), None)
    if text_field is None or text_field not in columns:
        wanted = repr(s.text_field) if s.text_field else f"any of {', '.join(TEXT_FIELDS)}"
        raise BenchError(f"{label}: no text field {wanted}; its columns: {', '.join(columns)} (set text_field)")
    category_field = s.category_field or ("category" if "category" in columns else None)
    if category_field is not None and category_field not in columns:
        raise BenchError(f"{label}: no column {category_field!r}; its columns: {', '.join(columns)}")
    convs, skipped = [], 0
    for i, row in enumerate(ds):
        at = f"{label} row {i}"
        context, turns = rows.text_value(row[text_field], at)
        if not turns:  # a ShareGPT-shaped record with no human turn (answer-only, empty): skipped, as by `sharegpt`
            skipped += 1
            continue
        category = rows.category_of(row, at, category_field) if category_field else DEFAULT_CATEGORY
        convs.append(rows.conversation(row.get("id", i), at, context, turns, category))
    files = sorted(Path(f["filename"]) for f in ds.cache_files)
    data = _files_digest_input(files)
    return RawSource(convs, data, files[0].parent if files else Path(s.name), label, skipped=skipped)


def _files_digest_input(files: list[Path]) -> bytes:
    """What the provenance hash covers: each cached Arrow file's name and sha256 (hashed in chunks: they can be
    large). A dataset held only in memory has none; the normalised text's hash still identifies it."""
    lines = []
    for path in files:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        lines.append(f"{path.name} {h.hexdigest()}")
    return "\n".join(lines).encode()


def _not_cached(s: spec.HuggingFace, datasets: ModuleType, exc: Exception) -> str:
    cache = getattr(getattr(datasets, "config", None), "HF_DATASETS_CACHE", "the Hugging Face datasets cache")
    args = ", ".join(repr(a) for a in (s.name, s.config) if a) + f", split={s.split!r}"
    reason = f"{type(exc).__name__}: {str(exc)[:300].rstrip('.')}"
    return (
        f"hf dataset {s.name!r} (config {s.config!r}, split {s.split!r}) cannot be loaded from the local cache "
        f"({cache}) with the hub off: {reason}. Cache it where a hub is reachable "
        f'(same HF_HOME / HF_DATASETS_CACHE): python -c "import datasets; datasets.load_dataset({args})"'
    )
