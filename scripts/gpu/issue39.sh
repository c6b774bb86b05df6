#!/usr/bin/env bash
# On the GPU host after install-on-gpu-host.sh (vLLM 0.26.0; an H200, or an H100 with the 40-layer profiles): issue 39's GPU work as one resumable job (run it under
# scripts/gpu/detached.sh so that it outlives one call; results in /tmp/res39, copied to $OUT/issue39.tgz each call,
# without nsys reports / SQLite exports and vLLM's run/ caches). V2 runner (VLLM_USE_V2_MODEL_RUNNER=1), as issue 21.
# Each task sets the patch state it needs first (`bench patch apply [--except dcp-spec-decode]`: seconds).
#   correct  item 4: tests/integration/test_dcp_spec_decode_gpu.py on the whole series (the fix applied):
#            pytest's output and junit XML in correct/.
#   profile  item 1: `bench profile` (nsys, the suite's NVTX ranges) of profiles/kimi-k2.6-rank-h200-dcp.toml's
#            8x8192x256 points (FLASHMLA/fp8, k = 3), in pairs: DCP 2 on the series WITHOUT dcp-spec-decode (what
#            users run today) and with the whole series, then DCP 8 the same, then DCP 1 (CAPTURES, default
#            "2:without 2:with 8:without 8:with 1:without", so that a lease cut short still leaves a pair).
#            PROFILE_PROMPTS measured requests a capture (default 8: one wave of the 8 users, ~110 steps).
#            BENCH_NVTX_ATTENTION=1 adds the MLA attention's path ranges (docs/nvtx-ranges.md) to `bench profile`'s
#            BENCH_NVTX=1, so each capture's analysis has nsys_step_paths.{md,csv} (docs/nsys-analysis.md "Decode
#            step by path"); profile/step-shares.md puts the captures' shares and by-path tables side by side.
#   sweep    item 2: profiles/kimi-k2.6-rank-h200-dcp-backends-{flashattn-mla,flashmla}.toml (target FLASHMLA/fp8
#            vs FLASH_ATTN_MLA/bf16 x DCP 1/2/4/8 x k 0/3 at 8x8192 and 8x2048) on the series without
#            dcp-spec-decode, one engine (server start, both shapes) at a time in SWEEP_ORDER, each resumed
#            (`sweep --resume`) by the next call or lease.
#   ab       item 5: `bench ab` series without the fix (:patched-except=dcp-spec-decode) vs the whole series
#            (:patched) at DCP 2, then DCP 8 (profiles/kimi-k2.6-rank-h200-dcp{2,8}-ab.toml, 8x8192x256),
#            AB_ROUNDS rounds each (default 3, the minimum; the effect expected is large), `ab --resume`d.
#            Item 4's end-to-end check rides along: every round's servers first generate greedy outputs for AB_OUTPUTS
#            (default 4) fixed 8192-token prompts, one at a time (`ab --check-outputs`), and compare.md says whether
#            the patched DCP-N rank generated the same tokens as the unpatched one (and whether the unpatched rounds
#            agree among themselves); estimated ~20-40 s a server start (a prefill and 32 decode steps a prompt).
# Usage: issue39.sh BUDGET_SECONDS TASK...   (e.g. `issue39.sh 1500 correct profile`). A finished task (or sub-step)
# is skipped; one cut by the budget (timeout: 124) resumes. RESUME39: an issue39.tgz an earlier lease brought back
# (carried in .gpu/), unpacked into /tmp/res39 on a fresh machine. Device time per task: /tmp/res39/<task>.seconds.
#
# Estimated device time (no lease has run any of it; from reports/examples/kimi-rank-h200-dcp, same model, GPU,
# vLLM and graphs): server ready 65-249 s a start (servers.csv: DCP 1 148/121, DCP 2 175/249, DCP 4 76, DCP 8
# 126/65/145; the cold compile cache of a fresh machine is the long end), an 8x8192x256 point's window 124-128 s at
# max_window_s 120 (39 s for DCP 4's short one), steps 34 (DCP 1) to 153 ms (DCP 8): one wave of 8 requests is
# ~110 steps, 4-17 s. A session has ~1,650 s of usable device time and 10 min a call; installing the bundle on a
# fresh machine takes its own share (not counted below).
#   correct  ~150 s: vLLM import and FlashMLA JIT-free kernels on small caches (4 sequences <= 1,029 tokens,
#            72 cases); the first call of a lease pays vLLM's import (~20 s).
#   profile  ~350-450 s a capture: a server start under nsys (~150-250 s), warm-up, one wave (slower under
#            tracing, ~10-30 s), then nsys's SQLite export and the analysis (~60-150 s for ~110 steps x 61 layers);
#            3 captures ~1,100-1,350 s; the 2 patched ones another ~700-900 s.
#   sweep    ~300 s an engine (start ~150 s + an 8x8192 point ~85 s + an 8x2048 point ~70 s at max_window_s
#            60), 16 engines: ~4,800 s, about three sessions. Cut: SWEEP_ORDER (default below) runs first k = 3 at
#            DCP 2, 8, 1 on FLASH_ATTN_MLA (what no lease has measured), then on FLASHMLA (the same machine, so the
#            two compare), then the k = 0 DCP 1 baselines: 8 engines, ~2,400 s; DCP 4 and the rest only after.
#   ab       ~265 s a side a round (start ~150 s + the greedy check ~20-40 s + a ~85 s point): 3 rounds x 2 sides
#            ~1,600 s a DCP size, ~3,200 s for DCP 2 and 8 (about two sessions; `ab --resume` continues a round cut by
#            the budget).
# All four: ~9,000 s, five to six sessions. One lease's plan: `correct profile` (~1,450 s) first.
set -uo pipefail
source scripts/gpu/common.sh
export VLLM_USE_V2_MODEL_RUNNER=1
budget=${1:?usage: issue39.sh BUDGET_SECONDS correct|profile|sweep|ab...}; shift
res=/tmp/res39
py=$(command -v python)
# The 61-layer rank needs the H200's memory; on a smaller card (an H100) the 40-layer variants of the same profiles
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=h200; [ "${mib:-0}" -lt 102400 ] && card=h100-l40
echo "== card: $card ($mib MiB)"
dcp_prof=profiles/kimi-k2.6-rank-$card-dcp.toml
back_prof=profiles/kimi-k2.6-rank-$card-dcp-backends
# The cut (issue 39 item 2): k = 3 at DCP 2, 8 and 1 on both backends, then the k = 0 DCP 1 baselines (8 engines,
# ~2,400 s: what "which backend and DCP size" needs); DCP 4 and the k = 0 DCP > 1 points only after them.
sweep_order=${SWEEP_ORDER:-"flashattn-mla:3:2,8,1 flashmla:3:2,8,1 flashattn-mla:0:1 flashmla:0:1 flashattn-mla:3:4 flashmla:3:4 flashattn-mla:0:2,8,4 flashmla:0:2,8,4"}
[ -n "${RESUME39:-}" ] && [ ! -d $res ] && tar xzf "$RESUME39" -C /tmp
mkdir -p $res
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -l 1 >> $res/gpu-telemetry.csv &
smi=$!
trap 'kill $smi 2>/dev/null' EXIT

left() { echo $((budget - SECONDS - 30)); }
set_patch() {  # whole | without: the series, or the series without dcp-spec-decode; its status kept per state
  local args=(); [ "$1" = without ] && args=(--except dcp-spec-decode)
  python -m bench patch apply "${args[@]}" >> $res/patch-apply.log 2>&1 || { echo "== bench patch apply ${args[*]} failed"; return 1; }
  python -m bench patch verify "${args[@]}" > $res/patch-status-$1.txt 2>&1 || { cat $res/patch-status-$1.txt; return 1; }
}
points_of() {  # PROFILE SIZES(,) K SHAPE...: point ids of those DCP sizes (in that order), k and shapes
  python - "$@" <<'PY'
import sys
from bench.config.plan import plan_sweep
prof, sizes, k, shapes = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3]), sys.argv[4:]
plan = plan_sweep(prof, dry_run=True)  # the ids `sweep --dry-run` prints (on CPU too: the check below)
print(",".join(p.id for n in sizes for p in plan.runnable
               if p.engine.dcp_size == n and p.engine.num_speculative_tokens == k and p.shape.label in shapes))
PY
}
capture() {  # NAME POINT: one nsys session of the DCP profile's point into $res/profile/NAME
  local name=$1 point=$2 out=$res/profile/$1 l; l=$(left)
  [ -e $out/.done ] && { echo "== profile $name done"; return 0; }
  [ "$l" -ge 400 ] || { echo "== $l s left: not starting profile $name (a capture takes ~350-450 s)"; return 124; }
  rm -rf $out; mkdir -p $res/profile
  echo "== profile $name: point $point ($l s left)"
  BENCH_NVTX_ATTENTION=1 timeout -s TERM "$l" python -m bench profile $dcp_prof --point "$point" \
    --num-prompts "${PROFILE_PROMPTS:-8}" --nsys "$NSYS" --out $out >> $res/profile/$name.log 2>&1
  local rc=$?; echo "== profile $name: exit $rc"
  [ $rc = 0 ] && touch $out/.done
  return $rc
}

for task in "$@"; do
  grep -qE "^exit [0-9]+$" $res/$task.exit 2>/dev/null && { echo "== $task done: $(cat $res/$task.exit)"; continue; }
  [ "$(left)" -gt 120 ] || { echo "== $(left) s left: not starting $task"; continue; }
  t0=$SECONDS
  case $task in
    correct)
      set_patch whole || exit 1
      mkdir -p $res/correct
      timeout -s TERM "$(left)" python -m pytest -q -m gpu -p no:cacheprovider -rs \
        --junitxml=$res/correct/junit.xml tests/integration/test_dcp_spec_decode_gpu.py > $res/correct.log 2>&1 ;;
    profile)
      rc=0
      for item in ${CAPTURES:-2:without 2:with 8:without 8:with 1:without}; do
        IFS=: read -r n state <<< "$item"
        [ -e $res/profile/dcp$n-$state-fix/.done ] && continue
        set_patch $state || exit 1
        capture "dcp$n-$state-fix" "$(points_of $dcp_prof $n 3 8x8192x256)" || { rc=$?; [ $rc = 124 ] && break; }
      done
      # a capture that failed is tried again by the next lease (its log says why): not finished until all are done
      for item in ${CAPTURES:-2:without 2:with 8:without 8:with 1:without}; do
        IFS=: read -r n state <<< "$item"; [ -e $res/profile/dcp$n-$state-fix/.done ] || rc=124
      done
      done_caps=(); for d in $res/profile/dcp{1,2,8}-{without,with}-fix; do [ -e $d/.done ] && done_caps+=($d); done
      [ ${#done_caps[@]} -gt 0 ] && python -m bench profile shares "${done_caps[@]}" --out $res/profile \
        > $res/profile/shares.log 2>&1
      (exit $rc) ;;
    sweep)
      set_patch without || exit 1
      rc=0
      for item in $sweep_order; do
        IFS=: read -r variant k sizes <<< "$item"
        prof=$back_prof-$variant.toml
        for n in ${sizes//,/ }; do
          pts=$(points_of $prof $n "$k" 8x8192x256 8x2048x256)
          l=$(left); [ "$l" -ge 300 ] || { echo "== $l s left: not starting $variant k$k dcp$n"; rc=124; break 2; }
          dir=$res/sweep-$variant; resume=(); [ -e $dir/manifest.json ] && resume=(--resume)
          echo "== sweep $variant k=$k DCP $n: $pts ($l s left)"
          timeout -s TERM $((l + 20)) python -m bench sweep $prof --time-budget "$l" --points "$pts" --out $dir \
            "${resume[@]}" --quiet >> $res/sweep.log 2>&1
          r=$?
          case $r in 0|3) ;; 7|124) rc=124; break 2 ;; *) rc=$r ;; esac  # 3: failed points (data); 7: cut by the budget
        done
      done
      (exit $rc) ;;
    ab)
      rc=0
      for n in 2 8; do
        grep -qE "^exit [0-9]+$" $res/ab-dcp$n.exit 2>/dev/null && continue
        l=$(left); [ "$l" -ge 560 ] || { echo "== $l s left: not starting ab dcp$n (a round ~530 s)"; rc=124; break; }
        resume=(); [ -d $res/ab-dcp$n ] && resume=(--resume)
        echo "== ab DCP $n ($l s left)"
        timeout -s TERM "$l" python -m bench ab profiles/kimi-k2.6-rank-$card-dcp$n-ab.toml \
          --baseline "$py:patched-except=dcp-spec-decode" --candidate "$py:patched" --rounds "${AB_ROUNDS:-3}" \
          --check-outputs "${AB_OUTPUTS:-4}" --out $res/ab-dcp$n "${resume[@]}" >> $res/ab-dcp$n.log 2>&1
        r=$?; [ $r = 124 ] && { rc=124; break; }
        echo "exit $r" > $res/ab-dcp$n.exit
      done
      (exit $rc) ;;
    *) echo "unknown task $task" >&2; exit 2 ;;
  esac
  rc=$?
  echo $((SECONDS - t0 + $(cat $res/$task.seconds 2>/dev/null || echo 0))) > $res/$task.seconds.new && mv $res/$task.seconds.new $res/$task.seconds
  log=$res/$task.log; [ -e $log ] || log=$(ls -t $res/*.log $res/profile/*.log 2>/dev/null | head -1)
  [ -n "$log" ] && grep -vE "^\[?(INFO|DEBUG)" "$log" | tail -20
  [ $rc -eq 124 ] || echo "exit $rc" > $res/$task.exit
  echo "== $task: exit $rc after $(cat $res/$task.seconds) s in all (124: cut by the budget, run again)"
done
tar czf "$OUT/issue39.tgz" --exclude="*/run" --exclude="*.nsys-rep" --exclude="*.sqlite" --exclude="nsys_kernels.csv" \
  -C /tmp res39
