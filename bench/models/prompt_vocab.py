"""Which token ids a random-id prompt may use for a given target: the model's own tokenizer decides.

A random-id workload sends token ids straight to /v1/completions, so its prompts need ids the target's tokenizer
really has, without its special tokens (a BOS or a chat marker in the middle of a prompt changes what is
measured). The tokenizer is found offline only: a local folder, or the Hugging Face cache. A hub id that is not
cached is an error that says how to cache it, never a silent fallback to ids 3..999.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError

log = logging.getLogger(__name__)
TOKENIZER_FILES = ["tokenizer*", "*.tiktoken", "tiktoken.model", "config.json", "special_tokens_map.json", "*.py"]


@dataclass(frozen=True)
class PromptVocab:
    size: int  # ids 0 .. size-1 exist in the tokenizer
    special_ids: frozenset[int]
    source: str  # the folder the tokenizer was read from

    def allowed(self, low: int = 0) -> list[int]:
        return [i for i in range(low, self.size) if i not in self.special_ids]


def tokenizer_folder(target: str) -> Path:
    """The local folder holding `target`'s tokenizer: the path itself, or its snapshot in the HF cache."""
    path = Path(target).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or target.startswith((".", "~")) or target.count("/") != 1:
        raise BenchError(f"model {target!r}: no such folder (and not a hub id of the form org/name)")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(target, local_files_only=True, allow_patterns=TOKENIZER_FILES))
    except Exception as exc:  # huggingface_hub raises several types for "not cached"
        raise BenchError(
            f"model {target!r}: its tokenizer is not in the local Hugging Face cache and no hub is reachable "
            f"({type(exc).__name__}). Cache it where a hub is reachable: `huggingface-cli download {target} "
            f"--include 'tokenizer*' '*.tiktoken' '*.model' '*.py' config.json`, or point [model] target at a "
            "local folder"
        ) from exc


def _vllm_get_tokenizer():
    """vLLM's own tokenizer loader, so the ids are the ones the server will see (its module moved in 0.27+)."""
    try:
        from vllm.tokenizers import get_tokenizer
    except ImportError:
        from vllm.transformers_utils.tokenizer import get_tokenizer  # vLLM 0.26
    return get_tokenizer


def prompt_vocab(target: str) -> PromptVocab:
    """Vocab size and special ids of the target's tokenizer as vLLM loads it (trust_remote_code: Kimi ships a
    tiktoken tokenizer as code in its repo)."""
    folder = tokenizer_folder(target)
    try:
        tok = _vllm_get_tokenizer()(str(folder), trust_remote_code=True)
    except Exception as exc:
        raise BenchError(
            f"model {target!r}: cannot load its tokenizer from {folder}: {type(exc).__name__}: {str(exc)[:300]}"
        ) from exc
    special = {int(i) for i in (tok.all_special_ids or [])}
    special.update(int(i) for i in (getattr(tok, "added_tokens_decoder", None) or {}))
    size = len(tok)
    if size - len(special) < 2:
        raise BenchError(f"model {target!r}: its tokenizer at {folder} has no ordinary tokens to build prompts from")
    return PromptVocab(size, frozenset(special), str(folder))
