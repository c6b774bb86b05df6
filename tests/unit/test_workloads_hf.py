"""Hugging Face datasets from the local cache only. Without `datasets` installed (the suite does not depend on it)
the error names the pip command; with it, a dataset in the cache loads with the hub off, and one that is not
cached is an error naming it and how to cache it. The test extra brings `datasets`, so the real library runs here
against a small dataset each test builds itself."""

import json
import os
import shutil
import sys

import pytest

from bench.core.errors import BenchError
from bench.workloads import load_dataset, parse_source
from bench.workloads.hf import offline_datasets


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_DATASETS_CACHE", str(tmp_path / "bench-cache"))
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)


def test_without_the_datasets_package_the_error_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(BenchError, match=r"need the Hugging Face `datasets` package.*pip install datasets"):
        load_dataset(parse_source({"kind": "hf", "name": "org/set"}))
    assert "HF_HUB_OFFLINE" not in os.environ  # the offline switch is put back


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """A dataset `org/tiny-set` (split test) in a private datasets cache, laid out as a hub download leaves it
    (<cache>/org___tiny-set/<config>/<version>/<hash>/), built from local JSON with no network."""
    import datasets
    from datasets.data_files import DataFilesDict
    from datasets.packaged_modules.json.json import Json

    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"question": "What is 2+2?", "category": "math"})
        + "\n"
        + json.dumps({"question": "Name a colour.", "category": "chat"})
        + "\n"
    )
    built = tmp_path / "built"
    builder = Json(
        cache_dir=str(built), dataset_name="tiny-set", data_files=DataFilesDict.from_patterns({"test": [str(rows)]})
    )
    builder.download_and_prepare()
    cache = tmp_path / "hf-datasets"
    shutil.copytree(builder.cache_dir, cache / "org___tiny-set" / "default" / "0.0.0" / "0123abcd")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


def test_a_cached_dataset_loads_with_the_hub_off(hf_cache):
    ds = load_dataset(parse_source({"kind": "hf", "name": "org/tiny-set", "split": "test"}))
    assert [c.turns for c in ds.conversations] == [("What is 2+2?",), ("Name a colour.",)]
    assert ds.categories == ["chat", "math"]
    assert ds.provenance.source == "hf:org/tiny-set split=test" and str(hf_cache) in ds.provenance.path
    assert len(ds.provenance.sha256) == 64
    assert "HF_HUB_OFFLINE" not in os.environ


def test_a_dataset_not_in_the_cache_is_named_with_how_to_cache_it(hf_cache):
    with pytest.raises(
        BenchError,
        match=r"hf dataset 'org/absent' .*cannot be loaded from the local cache.*"
        r"datasets\.load_dataset\('org/absent', split='test'\)",
    ):
        load_dataset(parse_source({"kind": "hf", "name": "org/absent", "split": "test"}))


def test_unknown_split_and_fields_are_errors(hf_cache):
    with pytest.raises(BenchError, match=r"split 'train'"):
        load_dataset(parse_source({"kind": "hf", "name": "org/tiny-set", "split": "train"}))
    with pytest.raises(BenchError, match=r"no text field 'body'; its columns: question, category"):
        load_dataset(parse_source({"kind": "hf", "name": "org/tiny-set", "split": "test", "text_field": "body"}))


def test_the_offline_switch_is_on_inside_and_restored_after():
    import datasets
    import huggingface_hub.constants

    before = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    with offline_datasets():
        assert datasets.config.HF_HUB_OFFLINE is True and huggingface_hub.constants.HF_HUB_OFFLINE is True
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert before == (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    assert "HF_HUB_OFFLINE" not in os.environ
