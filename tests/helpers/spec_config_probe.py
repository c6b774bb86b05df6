"""Build a real VllmConfig (no engine start) with a given speculative config and print, as JSON, what the
draft model's config gets on each runner path. Run in a fresh process: the vLLM it imports may be patched.

argv: TARGET_DIR DRAFT_DIR JSON_LIST_OF_SPECULATIVE_CONFIG_OVERRIDES (one result line per entry)
"""

import json
import sys
from types import SimpleNamespace


def name(value):
    return getattr(value, "name", value)


def main(target: str, draft: str, spec_json: str) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    spec = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3, **json.loads(spec_json)}
    try:
        config = EngineArgs(
            model=target, load_format="dummy", speculative_config=spec, enforce_eager=True, max_model_len=512
        ).create_engine_config()
    except Exception as exc:  # the error text is what the test checks
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    sc = config.speculative_config
    out = {
        "ok": True,
        "attention_backend": name(sc.attention_backend),
        "kv_cache_dtype": sc.kv_cache_dtype,
        "draft_attention_backend": name(getattr(sc, "draft_attention_backend", None)),
        "draft_kv_cache_dtype": getattr(sc, "draft_kv_cache_dtype", None),
        "target_kv_cache_dtype": config.cache_config.cache_dtype,
    }
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    v1 = SpecDecodeBaseProposer._create_draft_vllm_config(SimpleNamespace(speculative_config=sc, vllm_config=config))
    out["v1_draft_backend"] = name(v1.attention_config.backend)
    out["v1_draft_cache_dtype"] = v1.cache_config.cache_dtype
    if hasattr(sc, "apply_draft_overrides"):  # the V2 runner's path (eagle/utils.py load_eagle_model)
        v2 = sc.apply_draft_overrides(config)
        out["v2_draft_backend"] = name(v2.attention_config.backend)
        out["v2_draft_cache_dtype"] = v2.cache_config.cache_dtype
    return out


if __name__ == "__main__":
    for overrides in json.loads(sys.argv[3]):
        print("PROBE-RESULT " + json.dumps(main(sys.argv[1], sys.argv[2], json.dumps(overrides))))
