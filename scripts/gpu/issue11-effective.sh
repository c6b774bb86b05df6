#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh (vLLM 0.26.0 as installed: NOT yet patched): issue 11's proof by
# behaviour. profiles/tiny-effective-h200.toml (bf16 target KV, TRITON_MLA draft on fp8 KV) four times, each its
# own results folder, in this order (the patch is applied between the unpatched and the patched runs):
#   unpatched-upstream-v2   vLLM's own keys (attention_backend / kv_cache_dtype), VLLM_USE_V2_MODEL_RUNNER=1
#   unpatched-upstream-v1   vLLM's own keys, the default runner (V1 for this MoE model on 0.26.0)
#   patched-legacy-v1       the suite's patch, the Kimi launch configs' draft_* keys, default runner
#   patched-legacy-v2       the same with VLLM_USE_V2_MODEL_RUNNER=1
# Results go back as $OUT/effective.tgz (each folder minus run/).
set -uo pipefail
source scripts/gpu/common.sh
prof=profiles/tiny-effective-h200.toml
one() {  # NAME KEYS V2(0|1)
  local out=/tmp/res/effective/$1
  [ -e $out/manifest.json ] && grep -q '"status": "ok"' $out/points/*.json 2>/dev/null && { echo "== $1 done"; return; }
  echo "== $1"
  if [ "$3" = 1 ]; then export VLLM_USE_V2_MODEL_RUNNER=1; else unset VLLM_USE_V2_MODEL_RUNNER; fi
  timeout 170 python -m bench sweep $prof --out $out --draft-keys $2 2>&1 | grep -vE "^\[?(INFO|DEBUG)" \
    | tee "$OUT/sweep-$1.log" | tail -6
  unset VLLM_USE_V2_MODEL_RUNNER
}
if [ ! -e /tmp/bench-patched ]; then
  python -m bench patch status > "$OUT/patch-status-before.txt" 2>&1
  one unpatched-upstream-v2 upstream 1
  one unpatched-upstream-v1 upstream 0
  python -m bench patch apply > "$OUT/patch-apply.txt" 2>&1 && touch /tmp/bench-patched || exit 1
fi
python -m bench patch status > "$OUT/patch-status-after.txt" 2>&1
one patched-legacy-v1 legacy 0
one patched-legacy-v2 legacy 1
tar czf "$OUT/effective.tgz" --exclude='*/run' -C /tmp/res effective
for d in /tmp/res/effective/*/; do
  echo "== $d"; python - "$d" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1], "points").glob("*.json")):
    p = json.loads(f.read_text())
    eff = p.get("effective") or {}
    side = lambda m: {k: (eff.get(m) or {}).get(k) for k in ("backend", "kv_cache_dtype", "kv_spec_dtype", "layers")}
    print(p.get("status"), p.get("failure_reason"), eff.get("runner"), eff.get("source"),
          "target", side("target"), "draft", side("draft"), "mismatch", p.get("mismatch"))
PY
done
