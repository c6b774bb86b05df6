"""The one source of patches/: the edits, by exact anchors, that make each series' patch from pristine vLLM.

Usage: python scripts/edit_vllm_sources.py SERIES PRISTINE_ROOT [--check]

PRISTINE_ROOT holds an unmodified vllm/ (an unpacked wheel: `pip download --no-deps vllm==X`, then unzip). Each
target file of SERIES is edited in memory (an anchor found zero or several times is an error), and the series'
patch files are written as unified diffs (3 lines of context), one per fix, grouped as
patches/SERIES/series.toml says; then the manifest hashes to paste into series.toml are printed. With --check
nothing is written: the exit code is 1 when a committed patch or a series.toml hash differs from what these edits
make. tests/integration/test_patch_wheels.py runs that check on the real pristine sources, so the committed
patches cannot drift from this file. To change a patch, change an edit here and rerun; never edit a .patch.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable
from pathlib import Path

from bench.patching.manager import build_manifest_hashes, sha256_text
from bench.patching.series import PATCHES_DIR, load_series

SPEC = "vllm/config/speculative.py"
V1_PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
V2_EAGLE = "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"
V2_SPECULATOR = "vllm/v1/worker/gpu/spec_decode/speculator.py"
FLASHMLA = "vllm/v1/attention/backends/mla/flashmla.py"


def sub(text: str, old: str, new: str, path: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"{path}: anchor found {text.count(old)} times:\n{old}")
    return text.replace(old, new)


def edit_speculative(text: str) -> str:
    text = _add_legacy_fields(text)
    text = _keep_auto_for_the_draft_key(text)
    text = _resolve_legacy_keys_in_validator(text)
    if "_DRAFT_VLLM_CONFIG_OVERRIDES" in text:  # 0.32+: one table drives the V2 runner path
        text = _override_table_reads_legacy_keys(text)
    return text


def _add_legacy_fields(text: str) -> str:
    """The two legacy keys as fields, right after kv_cache_dtype's docstring, typed like their upstream names."""
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
    return "\n".join(lines)


def _keep_auto_for_the_draft_key(text: str) -> str:
    return sub(
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


def _resolve_legacy_keys_in_validator(text: str) -> str:
    return sub(
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


def _override_table_reads_legacy_keys(text: str) -> str:
    text = sub(
        text,
        """    ("attention_backend", "attention_config", "backend"),
    ("kv_cache_dtype", "cache_config", "cache_dtype"),""",
        """    ("draft_attention_backend", "attention_config", "backend"),
    ("draft_kv_cache_dtype", "cache_config", "cache_dtype"),""",
        SPEC,
    )
    return sub(
        text,
        """            if (value := getattr(self, src)) is not None:
                sub_config = replace""",
        """            if (value := getattr(self, src)) is not None:
                if src == "draft_attention_backend":
                    value = self.draft_attention_backend_override()
                sub_config = replace""",
        SPEC,
    )


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


_DCP_ROWS_FUNCTION = '''

def dcp_spec_decode_rows(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    num_rows: int,
    dcp_size: int,
    dcp_rank: int,
    interleave: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode row per query token of a DCP decode batch.

    FlashMLA's decode kernel masks a request's q query tokens as if they were
    the last q tokens of its KV: query i sees all but the last q - 1 - i keys.
    A DCP rank holds every N-th group of `interleave` tokens of a sequence,
    so the local keys that the query token at position p may see are the
    local tokens at positions <= p, whose count is the local length of p + 1,
    not the request's local length minus a token count. Each query token
    becomes a row of query length 1 with that local length, reading its
    request's block table: the kernel's causal assumption then holds.

    query_start_loc: [num_reqs + 1] token offsets of the decode requests.
    seq_lens: [num_reqs] whole (all-rank) sequence lengths, queries included.
    Returns the request of each row ([num_rows], int64) and its DCP-local
    length ([num_rows], int32); rows past the last request's tokens (padding)
    get length 0. No host sync.
    """
    num_reqs = seq_lens.shape[0]
    rows = torch.arange(
        num_rows, dtype=query_start_loc.dtype, device=query_start_loc.device
    )
    ends = query_start_loc[1 : num_reqs + 1].contiguous()
    req = torch.searchsorted(ends, rows, right=True)
    padding = req >= num_reqs
    req = req.clamp(max=num_reqs - 1)
    # Tokens of the sequence at or before this query token: its position + 1.
    visible = (seq_lens[req] - ends[req] + rows + 1).clamp(min=0)
    local = get_dcp_local_seq_lens(visible, dcp_size, dcp_rank, interleave)
    return req, local.masked_fill(padding, 0)
'''

_DCP_BUILDER_INIT = """
        # Under DCP the common init forced reorder_batch_threshold to 1, which
        # sends the k + 1 verify tokens of speculative decoding down the MLA
        # prefill-with-context path. They stay decodes here instead, one
        # decode row per query token (dcp_spec_decode_rows). Only where the
        # threshold was forced (this config's DCP size > 1: not a draft
        # replicated at DCP 1), and not with PCP, whose KV layout differs.
        self.dcp_spec_decode = (
            vllm_config.parallel_config.decode_context_parallel_size > 1
            and self.dcp_world_size > 1
            and not self.use_pcp
            and vllm_config.speculative_config is not None
        )
        max_decode_rows = vllm_config.scheduler_config.max_num_seqs
        if self.dcp_spec_decode:
            self.dcp_rank = get_dcp_group().rank_in_group
            self._init_reorder_batch_threshold(
                1, supports_spec_as_decode=True, supports_dcp_with_varlen=True
            )
            max_decode_rows *= self.reorder_batch_threshold
            # Persistent, so that FULL CUDA graphs replay with fresh rows.
            self.dcp_rows_seq_lens = torch.zeros(
                max_decode_rows, dtype=torch.int32, device=self.device
            )
            self.dcp_rows_block_table: torch.Tensor | None = None
"""

_DCP_ROWS_METHOD = '''
    def _dcp_decode_rows(
        self,
        block_table: torch.Tensor,
        seq_lens: torch.Tensor,
        query_start_loc: torch.Tensor,
        num_rows: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The block table and DCP-local lengths of one decode row per query
        token (dcp_spec_decode_rows), in this builder's persistent buffers."""
        if num_rows > self.dcp_rows_seq_lens.shape[0]:
            raise ValueError(
                f"{num_rows} DCP decode rows exceed the "
                f"{self.dcp_rows_seq_lens.shape[0]} allocated"
            )
        req, local = dcp_spec_decode_rows(
            query_start_loc,
            seq_lens,
            num_rows,
            self.dcp_world_size,
            self.dcp_rank,
            self.cp_kv_cache_interleave_size,
        )
        width = block_table.shape[1]
        if self.dcp_rows_block_table is None:
            self.dcp_rows_block_table = block_table.new_zeros(
                (self.dcp_rows_seq_lens.shape[0], width)
            )
        elif self.dcp_rows_block_table.shape[1] != width:
            # Captured FULL CUDA graphs read this buffer: a new one would leave
            # them reading stale rows. The runners pass the block table at its
            # full, fixed width, so a change is a bug, not a case to handle.
            raise ValueError(
                f"block table width changed from "
                f"{self.dcp_rows_block_table.shape[1]} to {width}: the DCP "
                "decode rows' persistent block table cannot be reallocated"
            )
        rows_block_table = self.dcp_rows_block_table[:num_rows]
        torch.index_select(block_table, 0, req, out=rows_block_table)
        rows_seq_lens = self.dcp_rows_seq_lens[:num_rows]
        rows_seq_lens.copy_(local)
        return rows_block_table, rows_seq_lens
'''


def edit_flashmla(text: str) -> str:
    """FLASHMLA under DCP keeps speculative decodes on the decode path: the builder takes the spec-as-decode
    threshold instead of DCP's forced 1 and gives every query token its own decode row (dcp_spec_decode_rows)."""
    text = sub(
        text,
        "from vllm.config.cache import CacheDType\n",
        "from vllm.config.cache import CacheDType\nfrom vllm.distributed.parallel_state import get_dcp_group\n",
        FLASHMLA,
    )
    text = sub(
        text,
        "from vllm.v1.attention.backends.utils import (\n",
        "from vllm.v1.attention.backends.utils import (\n    get_dcp_local_seq_lens,\n",
        FLASHMLA,
    )
    text = sub(
        text, "logger = init_logger(__name__)\n", "logger = init_logger(__name__)\n" + _DCP_ROWS_FUNCTION, FLASHMLA
    )
    init = """        super().__init__(
            kv_cache_spec, layer_names, vllm_config, device, FlashMLAMetadata
        )
"""
    text = sub(text, init, init + _DCP_BUILDER_INIT, FLASHMLA)
    text = sub(
        text,
        "                (vllm_config.scheduler_config.max_num_seqs + 1),\n",
        "                (max_decode_rows + 1),\n",
        FLASHMLA,
    )
    text = sub(
        text,
        """        query_lens_cpu = query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]
        # we use the max but all should be the same due to uniform length requirement
        max_query_len = query_lens_cpu.max().item()
""",
        """        if self.dcp_spec_decode:
            assert dcp_tot_seq_lens_device is not None
            block_table_tensor, seq_lens_device = self._dcp_decode_rows(
                block_table_tensor,
                dcp_tot_seq_lens_device,
                query_start_loc_device,
                num_decode_tokens,
            )
            max_query_len = 1
        else:
            query_lens_cpu = query_start_loc_cpu[1:] - query_start_loc_cpu[:-1]
            # we use the max but all should be the same due to uniform length
            # requirement
            max_query_len = query_lens_cpu.max().item()
""",
        FLASHMLA,
    )
    metadata = """        return FlashMLADecodeMetadata(
            block_table=block_table_tensor,
            seq_lens=seq_lens_device,
            scheduler_metadata=scheduler_metadata,
            dcp_tot_seq_lens=dcp_tot_seq_lens_device,
        )
"""
    text = sub(text, metadata, metadata + _DCP_ROWS_METHOD, FLASHMLA)
    return sub(
        text,
        """        num_decodes = attn_metadata.num_decodes
        q = reshape_query_for_spec_decode(q, num_decodes)
""",
        """        # One row per decode request, or under DCP with speculative decoding
        # one per query token (dcp_spec_decode_rows).
        num_decodes = attn_metadata.decode.seq_lens.shape[0]
        q = reshape_query_for_spec_decode(q, num_decodes)
""",
        FLASHMLA,
    )


SERIES = {
    "0.26": {
        SPEC: edit_speculative,
        V1_PROPOSER: edit_v1_proposer,
        V2_EAGLE: edit_v2_eagle_026,
        V2_SPECULATOR: edit_v2_speculator_026,
        FLASHMLA: edit_flashmla,
    },
    "0.32-cpu": {SPEC: edit_speculative, V1_PROPOSER: edit_v1_proposer},
    "0.33": {SPEC: edit_speculative, V1_PROPOSER: edit_v1_proposer, FLASHMLA: edit_flashmla},
}


def edited_sources(series: str, pristine: Path) -> dict[str, tuple[str, str]]:
    """{path: (pristine text, edited text)} for every target file of the series."""
    edits: dict[str, Callable[[str], str]] = SERIES[series]
    out = {}
    for rel, edit in edits.items():
        old = (pristine / rel).read_text()
        out[rel] = (old, edit(old))
    return out


def unified_diff(rel: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{rel}", f"b/{rel}")
    )


def make_patches(series: str, pristine: Path, patches_dir: Path = PATCHES_DIR) -> dict[str, str]:
    """{patch file name: text}: each fix's files, in series.toml's order, diffed from pristine to edited."""
    sources = edited_sources(series, pristine)
    manifest = load_series(patches_dir / series)
    listed = [fh.path for fix in manifest.fixes for fh in fix.files]
    if sorted(listed) != sorted(sources):
        raise SystemExit(f"{series}: series.toml lists {listed}, the edits here touch {sorted(sources)}")
    return {
        fix.patch.name: "".join(unified_diff(fh.path, *sources[fh.path]) for fh in fix.files) for fix in manifest.fixes
    }


def differences(series: str, pristine: Path, patches_dir: Path = PATCHES_DIR) -> list[str]:
    """What in patches/SERIES differs from what the edits make (empty: the committed patches are current)."""
    folder = patches_dir / series
    found = [
        f"{name}: differs from the regenerated patch"
        for name, text in make_patches(series, pristine, patches_dir).items()
        if not (folder / name).is_file() or (folder / name).read_text() != text
    ]
    sources = edited_sources(series, pristine)
    for fix in load_series(folder).fixes:
        for fh in fix.files:
            old, new = sources[fh.path]
            if (fh.before, fh.after) != (sha256_text(old), sha256_text(new)):
                found.append(
                    f"series.toml: hashes of {fh.path} differ (pristine {sha256_text(old)}, edited {sha256_text(new)})"
                )
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("series", choices=sorted(SERIES))
    parser.add_argument("pristine", type=Path, help="a folder holding an unmodified vllm/")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if patches/ is not current")
    args = parser.parse_args(argv)
    if args.check:
        found = differences(args.series, args.pristine)
        print("\n".join(found) or f"patches/{args.series} is current")
        return 1 if found else 0
    for name, text in make_patches(args.series, args.pristine).items():
        (PATCHES_DIR / args.series / name).write_text(text)
        print(f"wrote patches/{args.series}/{name}")
    print("series.toml files (paste where they differ):")
    print(build_manifest_hashes(PATCHES_DIR / args.series, args.pristine))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
