"""Random-id prompts use the target's own tokenizer: a local folder, or the offline Hugging Face cache; a hub id
that is not cached fails with how to cache it (no silent 3..999 fallback)."""

import shutil

import pytest

from bench.core.errors import BenchError
from bench.models.models import write_tiny_models
from bench.models.prompt_vocab import prompt_vocab
from tests.helpers.extras import needs_vllm


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_models(tmp_path_factory.mktemp("m"), "cpu")


@needs_vllm
def test_local_folder(tiny):
    v = prompt_vocab(str(tiny.target))
    assert v.size == 2048 and v.special_ids == {0, 1, 2} and 0 not in v.allowed() and 3 in v.allowed()


@needs_vllm
def test_hub_id_from_the_offline_cache(tiny, tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    snap = tmp_path / "hub" / "models--org--kimi-like" / "snapshots" / ("a" * 40)
    shutil.copytree(tiny.target, snap)
    (tmp_path / "hub" / "models--org--kimi-like" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--kimi-like" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    v = prompt_vocab("org/kimi-like")
    assert v.size == 2048 and v.source == str(snap)


def test_uncached_hub_id_fails_clearly(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BenchError, match=r"not in the local Hugging Face cache.*huggingface-cli download org/absent"):
        prompt_vocab("org/absent")
    with pytest.raises(BenchError, match="no such folder"):
        prompt_vocab("./not/here/at/all")
