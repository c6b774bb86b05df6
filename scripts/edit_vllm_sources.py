"""Maintainer tool: makes the edited copies of vLLM sources from which patches/ was diffed.

Usage: python scripts/edit_vllm_sources.py PRISTINE_ROOT EDITED_ROOT SERIES
Copies each target file of SERIES from PRISTINE_ROOT (a folder holding vllm/) to EDITED_ROOT and edits it by
exact anchors (a missing anchor is an error). Then `diff -ru` of the two trees is the series' patch, and
`python -m bench patch manifest` writes the hashes.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SPEC = "vllm/config/speculative.py"
V1_PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
V2_EAGLE = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
V2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/speculator.py"


def sub(text: str, old: str, new: str, path: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"{path}: anchor found {text.count(old)} times:\n{old}")
    return text.replace(old, new)


def edit_speculative(text: str) -> str:
    text = sub(
        text,
        "from pydantic import Field, SkipValidation, field_validator, model_validator",
        "from pydantic import (\n    Field,\n    SkipValidation,\n    ValidationInfo,\n"
        "    field_validator,\n    model_validator,\n)",
        SPEC,
    )
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("    kv_cache_dtype: "))
    kv_type = lines[start].split(":", 1)[1].split("=")[0].strip()
    end = next(i for i in range(start + 2, len(lines)) if lines[i].rstrip().endswith('"""'))
    fields = [
        '    draft_attention_backend: AttentionBackendEnum | Literal["auto"] | None = None',
        '    """Legacy name (used by Kimi launch configs) for the draft\'s attention backend:',
        '    an AttentionBackendEnum name (case-insensitive), or "auto" to autoselect instead',
        "    of inheriting. Wins over `attention_backend`; when unset, it takes",
        '    `attention_backend`\'s value."""',
        f"    draft_kv_cache_dtype: {kv_type} = None",
        '    """Legacy name for the draft\'s KV cache dtype. Wins over `kv_cache_dtype`;',
        '    when unset, it takes `kv_cache_dtype`\'s value."""',
    ]
    lines[end + 1 : end + 1] = fields
    text = "\n".join(lines)
    text = sub(
        text,
        """    @field_validator("attention_backend", mode="before")
    @classmethod
    def _parse_attention_backend(cls, value: Any) -> Any:
        if isinstance(value, str):
            if value.lower() == "auto":
                return None
""",
        """    @field_validator("attention_backend", "draft_attention_backend", mode="before")
    @classmethod
    def _parse_attention_backend(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            if value.lower() == "auto":
                # The legacy draft key keeps "auto" so that it can replace an
                # inherited backend with autoselection.
                return "auto" if info.field_name == "draft_attention_backend" else None
""",
        SPEC,
    )
    text = sub(
        text,
        """    @model_validator(mode="after")
    def _verify_args(self) -> Self:
""",
        '''    def _resolve_legacy_draft_overrides(self) -> None:
        """Make the legacy draft_* keys and their upstream names agree: an unset
        draft_* key takes the upstream value; a set one wins and is mirrored into
        the upstream name ("auto" is autoselect, which is None there)."""
        if self.draft_attention_backend is None:
            self.draft_attention_backend = self.attention_backend
        elif self.draft_attention_backend == "auto":
            self.attention_backend = None
        else:
            self.attention_backend = self.draft_attention_backend
        if self.draft_kv_cache_dtype is None:
            self.draft_kv_cache_dtype = self.kv_cache_dtype
        else:
            self.kv_cache_dtype = self.draft_kv_cache_dtype

    def draft_attention_backend_override(self) -> AttentionBackendEnum | None:
        """The backend the draft model's config gets (None: autoselect)."""
        backend = self.draft_attention_backend
        return None if backend == "auto" else backend

    @model_validator(mode="after")
    def _verify_args(self) -> Self:
        self._resolve_legacy_draft_overrides()
''',
        SPEC,
    )
    if "_DRAFT_VLLM_CONFIG_OVERRIDES" in text:  # 0.32+: one table drives the V2 runner path
        text = sub(
            text,
            """    ("attention_backend", "attention_config", "backend"),
    ("kv_cache_dtype", "cache_config", "cache_dtype"),""",
            """    ("draft_attention_backend", "attention_config", "backend"),
    ("draft_kv_cache_dtype", "cache_config", "cache_dtype"),""",
            SPEC,
        )
        text = sub(
            text,
            """            if (value := getattr(self, src)) is not None:
                sub_config = replace""",
            """            if (value := getattr(self, src)) is not None:
                if src == "draft_attention_backend":
                    value = self.draft_attention_backend_override()
                sub_config = replace""",
            SPEC,
        )
    return text


def edit_v1_proposer(text: str) -> str:
    text = sub(
        text,
        "                backend=spec_cfg.attention_backend,\n",
        "                backend=spec_cfg.draft_attention_backend_override(),\n",
        V1_PROPOSER,
    )
    text = sub(
        text,
        "        if spec_cfg.kv_cache_dtype is not None:\n",
        "        if spec_cfg.draft_kv_cache_dtype is not None:\n",
        V1_PROPOSER,
    )
    return sub(
        text,
        "                    cache_dtype=spec_cfg.kv_cache_dtype,\n",
        "                    cache_dtype=spec_cfg.draft_kv_cache_dtype,\n",
        V1_PROPOSER,
    )


def edit_v2_eagle_026(text: str) -> str:
    return sub(
        text,
        """    if speculative_config.kv_cache_dtype is not None:
        vllm_config = replace(
            vllm_config,
            cache_config=replace(
                vllm_config.cache_config,
                cache_dtype=speculative_config.kv_cache_dtype,
            ),
        )
""",
        """    # The draft gets its own attention backend and KV dtype when asked for,
    # instead of inheriting the target's.
    if speculative_config.draft_attention_backend is not None:
        vllm_config = replace(
            vllm_config,
            attention_config=replace(
                vllm_config.attention_config,
                backend=speculative_config.draft_attention_backend_override(),
            ),
        )
    if speculative_config.draft_kv_cache_dtype is not None:
        vllm_config = replace(
            vllm_config,
            cache_config=replace(
                vllm_config.cache_config,
                cache_dtype=speculative_config.draft_kv_cache_dtype,
            ),
        )
""",
        V2_EAGLE,
    )


def edit_v2_speculator_026(text: str) -> str:
    text = sub(
        text,
        "from vllm.v1.worker.gpu.block_table import BlockTables\n",
        "from vllm.v1.worker.gpu.block_table import BlockTables\n"
        "from vllm.v1.worker.gpu.cp_utils import prepare_dcp_local_seq_lens\n",
        V2_SPECULATOR,
    )
    text = sub(
        text,
        """        slot_mappings = self.block_tables.slot_mappings[:, :num_tokens_padded]
        attn_metadata = build_attn_metadata(""",
        """        slot_mappings = self.block_tables.slot_mappings[:, :num_tokens_padded]
        seq_lens = self.input_buffers.seq_lens[:num_reqs_padded]
        # Under DCP the MLA metadata builder replaces seq_lens with the local
        # lengths, so they must be passed (None crashes it in warmup).
        dcp_local_seq_lens = None
        if self.block_tables.cp_size > 1:
            prepare_dcp_local_seq_lens(
                self.input_buffers.dcp_local_seq_lens,
                self.input_buffers.seq_lens,
                num_reqs,
                self.block_tables.cp_size,
                self.block_tables.cp_rank,
                self.block_tables.cp_interleave,
            )
            dcp_local_seq_lens = self.input_buffers.dcp_local_seq_lens[
                :num_reqs_padded
            ]
        attn_metadata = build_attn_metadata(""",
        V2_SPECULATOR,
    )
    return sub(
        text,
        """            seq_lens=self.input_buffers.seq_lens[:num_reqs_padded],
            max_seq_len=self.draft_max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
        )""",
        """            seq_lens=seq_lens,
            max_seq_len=self.draft_max_seq_len,
            block_tables=block_tables,
            slot_mappings=slot_mappings,
            kv_cache_config=self.kv_cache_config,
            causal=causal,
            dcp_local_seq_lens=dcp_local_seq_lens,
        )""",
        V2_SPECULATOR,
    )


SERIES = {
    "0.26": {
        SPEC: edit_speculative,
        V1_PROPOSER: edit_v1_proposer,
        V2_EAGLE: edit_v2_eagle_026,
        V2_SPECULATOR: edit_v2_speculator_026,
    },
    "0.32-cpu": {SPEC: edit_speculative, V1_PROPOSER: edit_v1_proposer},
    "0.33": {SPEC: edit_speculative, V1_PROPOSER: edit_v1_proposer},
}


def main(pristine: str, edited: str, series: str) -> None:
    for rel, edit in SERIES[series].items():
        src, dst = Path(pristine, rel), Path(edited, rel)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(edit(src.read_text()))
        shutil.copymode(src, dst)


if __name__ == "__main__":
    main(*sys.argv[1:])
