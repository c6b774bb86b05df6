"""Offline generation with the tiny Kimi-shaped target + EAGLE3 MLA draft on CPU; prints one JSON line.

argv: TARGET_DIR DRAFT_DIR SPECULATIVE_CONFIG_OVERRIDES_JSON
"""

import json
import sys


def main(target: str, draft: str, overrides: str) -> dict:
    from vllm import LLM, SamplingParams

    spec = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3, **json.loads(overrides)}
    try:
        # The target pinned to CPU_MLA too: an AMX host would autoselect AMX_MLA, whose block size a CPU_MLA
        # draft cannot share.
        llm = LLM(
            model=target,
            load_format="dummy",
            speculative_config=spec,
            enforce_eager=True,
            attention_backend="CPU_MLA",
            max_model_len=512,
            max_num_seqs=4,
            kv_cache_memory_bytes=256 * 2**20,
            disable_log_stats=False,
            seed=0,
        )
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    outs = llm.generate(
        [{"prompt_token_ids": list(range(3, 35))}] * 4, SamplingParams(max_tokens=16, ignore_eos=True, temperature=0)
    )
    metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics() if "spec_decode" in m.name}
    return {"ok": True, "tokens": [len(o.outputs[0].token_ids) for o in outs], "metrics": metrics}


if __name__ == "__main__":
    print("GENERATE-RESULT " + json.dumps(main(*sys.argv[1:4])))
