"""`bench ab`: the same profile against two vLLM environments, interleaved (A B, B A, A B, ...) so that drift
hits both sides alike, into one comparison. An environment is a Python interpreter (or venv) with the suite
importable, optionally with the patch state to set before each of its runs."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError, ExitCode
from bench.core.files import atomic_write_bytes
from bench.core.fmt import md_rows
from bench.core.hardware import detect_machine
from bench.results.environment import host_identity, point_sessions, same_machine
from bench.results.store import SweepStore
from bench.verdicts.sides import AbSide, write_ab_side
from bench.verdicts.stats import (
    CPU_AA_BETWEEN_CV,
    MIN_STARTS,
    POWER,
    log_threshold,
    paired_sd_from_cv,
    per_test_alpha,
    plan_design,
    projected_bounds,
    sd_lower_bound,
    sequential_levels,
)

REPO = Path(__file__).resolve().parents[2]


PATCH_STATES = ("patched", "unpatched")
SUBSET_FLAGS = {"patched-except": "--except", "patched-only": "--only"}  # ENV suffix -> `bench patch apply` flag
DRAFT_KEYS_FIX = "draft-overrides"  # the fix that makes vLLM accept the draft_* keys


@dataclass(frozen=True)
class Env:
    python: str
    # "patched", "unpatched", "patched-except=FIX[,FIX...]", "patched-only=FIX[,FIX...]" or None (leave as is)
    patch: str | None
    variables: tuple[tuple[str, str], ...] = ()  # set for its runs, servers included (e.g. BENCH_STEP_DELAY_MS)

    def subset(self) -> tuple[str, list[str]] | None:
        """("patched-except" or "patched-only", the fix ids) for a subset of the series, else None."""
        if self.patch is None or "=" not in self.patch:
            return None
        kind, _, ids = self.patch.partition("=")
        return kind, [i.strip() for i in ids.split(",") if i.strip()]

    def patch_args(self) -> list[str]:
        """The `bench patch` arguments that set this side's patch state ([] to leave it as is)."""
        if self.patch is None:
            return []
        if (subset := self.subset()) is not None:
            kind, ids = subset
            return ["apply", SUBSET_FLAGS[kind], ",".join(ids)]
        return ["apply" if self.patch == "patched" else "revert"]

    @property
    def draft_keys(self) -> str:
        # Unpatched vLLM (or a subset without draft-overrides) rejects the draft_* keys: hand it vLLM's own names
        # for the same settings.
        if self.patch == "unpatched":
            return "upstream"
        if (subset := self.subset()) is not None:
            kind, ids = subset
            has_fix = (DRAFT_KEYS_FIX in ids) == (kind == "patched-only")
            return "legacy" if has_fix else "upstream"
        return "legacy"

    def label(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.variables)
        return f"{self.python}{':' + self.patch if self.patch else ''}{extra}"


def parse_variables(items: list[str] | None) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE items (--baseline-env / --candidate-env) as sorted pairs."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BenchError(f"environment variable {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return tuple(sorted(out.items()))


def parse_env(spec: str, variables: list[str] | None = None) -> Env:
    """PATH[:patched|:unpatched|:patched-except=FIX[,FIX...]|:patched-only=FIX[,FIX...]]; fix ids are checked
    against the suite's known fixes here, and against the installed series when the side is set (`bench patch`)."""
    from bench.patching.probes import PROBES

    path, _, patch = spec.partition(":")
    kind, eq, ids = patch.partition("=")
    if eq:
        named = [i.strip() for i in ids.split(",") if i.strip()]
        unknown = [i for i in named if i not in PROBES]
        if kind not in SUBSET_FLAGS or not named or unknown:
            raise BenchError(
                f"environment {spec!r}: a subset suffix is :patched-except=FIX[,FIX...] or :patched-only=FIX[,...]"
                f" with FIX among {', '.join(PROBES)}" + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        patch = f"{kind}={','.join(named)}"
    elif patch not in ("", *PATCH_STATES):
        raise BenchError(
            f"environment {spec!r}: the suffix must be :patched, :unpatched, :patched-except=FIX[,...] or "
            ":patched-only=FIX[,...]"
        )
    p = Path(path)
    if p.is_dir():
        p = p / "bin" / "python"
    if not p.exists():
        raise BenchError(f"environment {spec!r}: no Python interpreter at {p}")
    return Env(str(p), patch or None, parse_variables(variables))


def _run(env: Env, args: list[str]) -> int:
    return subprocess.run(
        [env.python, "-m", "bench", *args], cwd=REPO, env={**os.environ, **dict(env.variables)}
    ).returncode


def run_ab(
    profile: str,
    a: Env,
    b: Env,
    *,
    rounds: int | None,
    out: Path | None,
    repeat: int = 1,
    alpha: float = 0.05,
    min_effect: float = 0.02,
    max_effect: float = 0.05,
    correction: str = "holm",
    paired: bool = True,
    expected_noise: float | None = None,
    ray: str | None = None,
    calibrate: bool = False,
    max_rounds: int | None = None,
    resume: bool = False,
    warm_start: bool = False,
    check_outputs: int = 0,
) -> int:
    """Each round starts one server per engine config on each side: rounds = server starts a side, the unit of
    the comparison, paired by round unless `paired` is False. `rounds` None: planned (`plan_design`) from the
    noise: `expected_noise`, else this machine's calibration of the profile (bench.commands.calibration), else the default;
    with `max_rounds`, MIN_STARTS. The design is locked in OUT/design.json before the first round (`lock_design`):
    `resume` with another design is refused, naming each change.
    `calibrate`: an A/A (b is a) whose between-start noise is stored for later plans. `max_rounds`: sequential, a
    look after every round from `rounds` on at its O'Brien-Fleming level (bench.verdicts.stats.sequential_levels), stopping
    at the first look that passes or finds a regression, or for futility (`futile`); every look is kept in
    looks.json and compare.md.
    `ray`: each sweep runs on that cluster (`sweep --ray`; bench.distributed.ab_rounds says what else).
    `resume`: continue the A/B already in `out` (a run cut by a time limit): each round's sweep resumes where it
    stopped (`sweep --resume`: a finished one starts no server), so only what is missing runs.
    `warm_start`: each side's first sweep this call runs starts its servers once unmeasured first (`sweep
    --warm-start`), so that no round's server is the machine's first or the one that compiled (a new lease is a
    fresh machine).
    `check_outputs`: every round's sweeps record greedy outputs on that many fixed prompts (`sweep --check-outputs`);
    compare.md compares them (bench.verdicts.outputs)."""
    if calibrate and b != a:  # its spread would be stored as this machine's noise, the A/B's effect included
        raise BenchError("ab --calibrate runs an A/A of the baseline: give no --candidate (calibrate, then compare)")
    if warm_start and ray is not None:
        raise BenchError("ab --warm-start is for rounds on this machine, not with --ray")
    if check_outputs and ray is not None:
        raise BenchError("ab --check-outputs is for rounds on this machine, not with --ray")
    if ray is not None:
        from bench.distributed import ab_rounds

        ab_rounds.check_envs([a.patch, b.patch])
        if calibrate:  # the cluster's nodes, not this machine, would be measured and the key would name this one
            raise BenchError("ab --calibrate --ray is not supported: a calibration is kept per machine, not cluster")
    if resume and (out is None or not Path(out).is_dir()):
        raise BenchError(f"ab --resume needs --out, the folder of the A/B to continue ({out} is not one)")
    out = Path(out or REPO / "reports" / f"ab-{Path(profile).stem}-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if not resume and ((out / "baseline").exists() or (out / "candidate").exists()):
        raise BenchError(f"{out} already holds an A/B run (--resume continues it)")
    from bench.commands import calibration
    from bench.config.plan import plan_sweep
    from bench.verdicts.compare import GATED

    planned = plan_sweep(profile, dry_run=True)
    profile_key = calibration.profile_key(planned.profile, repeat)
    if expected_noise is not None:
        sd = paired_sd_from_cv(expected_noise) if paired else expected_noise
        why = f"planning with --expected-noise {expected_noise:.1%} between starts"
    elif ray is not None:
        sd = paired_sd_from_cv(CPU_AA_BETWEEN_CV) if paired else CPU_AA_BETWEEN_CV
        why = f"no calibration on a Ray cluster: planning with a between-start CV of {CPU_AA_BETWEEN_CV:.1%}"
    else:
        sd, why = calibration.planning_noise(profile_key, detect_machine(), CPU_AA_BETWEEN_CV, paired=paired)
    print(f"ab noise: {why}", file=sys.stderr, flush=True)
    locked = read_design(out) if resume else None
    if rounds is None and locked is not None:
        rounds = int(locked["rounds"])
    need, plan = plan_design(rounds or 0, alpha, sd, max_effect, paired)
    if rounds is None:
        if max_rounds is not None:
            rounds = min(MIN_STARTS, max_rounds)
        elif need is None:
            raise BenchError(f"ab: {plan}; reduce the noise or give --rounds (an A/A would end inconclusive)")
        else:
            rounds = need
        plan = plan_design(rounds, alpha, sd, max_effect, paired)[1]
    if rounds < MIN_STARTS:
        raise BenchError(f"ab --rounds {rounds}: a t bound needs at least {MIN_STARTS} rounds")
    tests = len(planned.runnable) * len(GATED)  # each point is gated on every GATED metric
    levels = _looks(rounds, max_rounds, alpha)
    design = {
        "rounds": rounds,
        "max_rounds": max_rounds,
        "alpha": alpha,
        "looks": {str(n): level for n, level in levels.items()},
        "max_effect": max_effect,
        "min_effect": min_effect,
        "correction": correction,
        "test": "one-sided t on log ratios, " + ("paired by round" if paired else "unpaired (Welch)"),
        "paired": paired,
        "gated": list(GATED),
        "profile": profile_key,
    }
    lock_design(out, design, resume)
    looks_text = ", ".join(f"{n} ({lv:.2g})" for n, lv in levels.items())
    text = (
        f"sequential: looks after rounds {looks_text} (O'Brien-Fleming alpha spending, futility stop); {plan}"
        if levels
        else plan
    )
    print(f"ab design: {text}; {tests} gated tests", file=sys.stderr, flush=True)
    gate = {"min_effect": min_effect, "max_effect": max_effect, "correction": correction, "paired": paired}
    ab_salt(out, planned.profile.run.prompt_salt)  # after the design's checks: a refused A/B writes nothing
    for side, env in (("baseline", a), ("candidate", b)):  # what this A/B set per side, for compare.md
        write_ab_side(out / side, AbSide(python=env.python, patch=env.patch, variables=dict(env.variables)))
    warm = {"baseline": warm_start, "candidate": warm_start}  # each spent by that side's first run this call
    extra = ("--check-outputs", str(check_outputs)) if check_outputs else ()
    result, looks = _run_rounds(max_rounds or rounds, levels, alpha, gate, a, b, out, profile, repeat, ray, warm, extra)
    code = _write_compare(out, result, looks, ray)
    if calibrate:
        _store_calibration(out, profile_key, alpha, max_effect)
        return ExitCode.OK if code != ExitCode.GATE_FAILED else code  # an A/A that "regressed" says so
    return code


DESIGN = "design.json"


def read_design(out: Path) -> dict | None:
    """The design an A/B folder locked (`lock_design`), or None (an A/B begun before designs were locked)."""
    path = Path(out) / DESIGN
    return json.loads(path.read_text()) if path.exists() else None


def lock_design(out: Path, design: dict, resume: bool) -> None:
    """Write the design to OUT/design.json before the first round; on `resume`, refuse (exit 1) a design that
    differs from the one locked, naming each changed key with both values, so that a finished or cut A/B cannot be
    extended with more rounds, other looks or a looser gate and judged again as if planned that way. A folder from
    before designs were locked gets the given one, said on stderr."""
    locked = read_design(out) if resume else None
    if locked is not None:
        changed = [
            f"{key}: locked {json.dumps(locked.get(key))}, given {json.dumps(value)}"
            for key, value in design.items()
            if json.loads(json.dumps(value)) != locked.get(key)
        ]
        if changed:
            raise BenchError(
                f"ab --resume: {out} locked another design ({'; '.join(changed)}); resume with the locked design "
                "(the flags it began with) or start a new --out"
            )
        return
    if resume:
        print(
            f"ab --resume: {out} has no {DESIGN} (begun before designs were locked): locking this one", file=sys.stderr
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / DESIGN, json.dumps(design, indent=1).encode())


def _looks(rounds: int, max_rounds: int | None, alpha: float) -> dict[int, float]:
    """The sequential looks of `--max-rounds` ({} for a fixed design)."""
    if max_rounds is None:
        return {}
    if max_rounds < rounds:
        raise BenchError(f"ab --max-rounds {max_rounds} is below --rounds {rounds}")
    return sequential_levels(rounds, max_rounds, alpha)


def futile(result: dict, max_rounds: int, level: float) -> bool:
    """The futility rule of `ab --max-rounds`: stop, inconclusive, when at `max_rounds` rounds, with each gated
    test's estimate as observed now, its spread at the 95% lower confidence bound of the observed one (optimistic:
    the sd of 3-5 rounds is itself noisy, and projecting the observed sd itself would stop A/As that later rounds
    would have passed; docs/verdicts.md) and the last look's level (`level`), some gated test's upper bound would
    still be at or above --max-effect (no pass) while no gated test's lower bound would be above 0 with a slowdown
    of at least --min-effect (no regression either). Only an inconclusive look can stop so; stopping never makes
    a pass or a regression, so neither error rate grows (a regression the remaining rounds might have shown is
    lost: the rule waits while one is in sight)."""
    from bench.verdicts.compare import GATED, METRICS

    t = result["table"]
    g = t[t.metric.isin(GATED)]
    if g.empty or g.log_estimate.isna().any():
        return False
    lower_level = per_test_alpha(level, result["gated_tests"], result["correction"])
    can_pass, may_regress = True, False
    for r in g.itertuples():
        sd = sd_lower_bound(r.sd_log, r.df) if r.df > 0 else r.sd_log
        lo, hi = projected_bounds(r.log_estimate, sd, bool(r.paired), max_rounds, level, lower_level)
        can_pass &= hi < log_threshold(result["max_effect"], METRICS[r.metric])
        may_regress |= lo > 0 and r.slowdown >= result["min_effect"]
    return not can_pass and not may_regress


def _run_rounds(
    total: int,
    levels: dict[int, float],
    alpha: float,
    gate: dict,
    a: Env,
    b: Env,
    out: Path,
    profile: str,
    repeat: int,
    ray: str | None,
    warm: dict[str, bool],
    extra: Sequence[str] = (),
) -> tuple[dict, list[dict]]:
    """Run the rounds; after each round that has a look, judge at its level and stop at the first that decides
    (regression or pass) or is futile (`futile`, before the last look). Returns the last judgement (at `alpha`
    when no look was taken) and the looks, each also kept in looks.json as it is taken."""
    from bench.verdicts.compare import compare_dirs, outcome

    def judge(level: float) -> dict:
        return compare_dirs(out / "baseline", out / "candidate", alpha=level, **gate)

    looks: list[dict] = []
    result: dict | None = None
    for r in range(total):
        _round(r, total, a, b, out, profile, repeat, ray, warm, extra)
        if (level := levels.get(r + 1)) is None:
            continue
        result = judge(level)
        code, line = outcome(result)
        stop_futile = code == ExitCode.INCONCLUSIVE and r + 1 < total and futile(result, total, levels[total])
        if stop_futile:
            line += f"; futility stop: even {total} rounds would not settle it at the spread observed"
        looks.append({"rounds": r + 1, "level": level, "exit": int(code), "outcome": line, "futile": stop_futile})
        atomic_write_bytes(out / "looks.json", json.dumps(looks, indent=1).encode())
        print(f"look after round {r + 1} (level {level:.3g}): {line}", file=sys.stderr, flush=True)
        if code in (ExitCode.OK, ExitCode.GATE_FAILED) or stop_futile:
            break
    return (result if result is not None else judge(alpha)), looks


def _write_compare(out: Path, result: dict, looks: list[dict], ray: str | None) -> int:
    """compare.md (with the Ray nodes and the sequential looks when there are some), printed; returns the exit code."""
    from bench.verdicts.compare import compare_markdown, outcome

    text = compare_markdown(result, out)
    if ray is not None:
        from bench.distributed import ab_rounds

        text += ab_rounds.nodes_markdown(out, len(list((out / "baseline").glob("round-*"))))
    if looks:
        rows = ([k["rounds"], f"{k['level']:.3g}", k["exit"], k["outcome"]] for k in looks)
        text += "\n## Sequential looks\n\n" + "\n".join(md_rows(["rounds", "level", "exit", "outcome"], rows)) + "\n"
    atomic_write_bytes(out / "compare.md", text.encode())
    print(text)
    code, line = outcome(result)
    print(line, file=sys.stderr)
    return code


def _store_calibration(out: Path, profile_name: str, alpha: float, max_effect: float) -> None:
    """`ab --calibrate`: the between-start noise of this A/A (per gated metric, the sd of the rounds' log ratios and
    its 80% upper bound: bench.commands.calibration.measure), stored for later plans on this machine with the rounds it
    plans for --max-effect at --alpha (bench.verdicts.stats.plan_rounds)."""
    from bench.commands import calibration
    from bench.verdicts.compare import GATED, load_side, pair_rounds
    from bench.verdicts.stats import plan_rounds

    base, cand = load_side(out / "baseline"), load_side(out / "candidate")
    common = set(base) & set(cand)
    sides = {p: base[p].servers + cand[p].servers for p in common}
    rounds = {p: pair_rounds(base[p], cand[p]) for p in common}
    entry = {"profile": profile_name, **calibration.measure(sides, GATED, rounds)}
    found = [f for f in entry["metrics"].values() if f.get("sd_log_ratio_upper") is not None]
    if not found:
        print("calibration: too few rounds to measure the noise (nothing stored)", file=sys.stderr)
        return
    bound = max(f["sd_log_ratio_upper"] for f in found)
    entry["planned_rounds"] = plan_rounds(bound, max_effect, alpha, paired=True, higher_better=False)
    entry["planned_for"] = {"max_effect": max_effect, "alpha": alpha, "paired": True}
    path = calibration.save(profile_name, detect_machine(), entry)
    atomic_write_bytes(out / "calibration.json", json.dumps(entry, indent=1).encode())
    print(
        f"calibration: sd of a round's log ratio up to {max(f['sd_log_ratio'] for f in found):.1%} (80% upper "
        f"bound {bound:.1%}) over {entry['starts_per_point']} starts a point: {entry['planned_rounds']} rounds "
        f"let an A/A pass --max-effect {max_effect:.0%} ({POWER_TEXT}); stored in {path}",
        file=sys.stderr,
    )


POWER_TEXT = f"{POWER:.0%} of the time for one gated test, at that bound"


def ab_salt(out: Path, pinned: str | None = None) -> str:
    """The A/B's own prompt salt, kept in `OUT/prompt-salt` so that `ab --resume` sends what the cut run would have:
    the profile's `[run] prompt_salt` when it pins one (`pinned`: its rounds are `{salt}-r0`, `{salt}-r1`, ... from
    any checkout, not a new salt that overrides it; found in review), else one made on the first call. A resumed
    A/B keeps the salt it began with; one begun with another salt than the profile pins is refused, not mixed."""
    path = out / "prompt-salt"
    if path.exists():
        salt = path.read_text().strip()
        if pinned is not None and salt != pinned:
            raise BenchError(
                f"{out} began with prompt salt {salt!r}; the profile pins {pinned!r} "
                "(a resumed A/B keeps its salt: give another --out, or the profile it began with)"
            )
        return salt
    from bench.load.prompts import new_salt

    salt = pinned or new_salt()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, salt.encode())
    return salt


def round_salt(out: Path, r: int) -> str:
    """The prompt salt of round r, both sides': the A/B's salt (`ab_salt`) and the round. Each round's sides are
    new server starts, so the same prompts on both hit no cache; the next round draws fresh ones."""
    return f"{ab_salt(out)}-r{r}"


def _measured_machines(round_dir: Path) -> tuple[list[dict], bool]:
    """The environments of the sessions that measured `round_dir`'s points, and whether every planned point has a
    record (a side finished); ([], False) for a round not begun."""
    if not (round_dir / "manifest.json").exists():
        return [], False
    store = SweepStore(round_dir)
    manifest, records = store.manifest(), store.records()
    sessions = manifest.get("sessions") or []
    used = sorted(set(point_sessions(manifest, records).values()))
    return [sessions[i] for i in used], len(records) >= len(manifest.get("plan") or [])


def set_aside_other_machine(out: Path, r: int) -> list[Path]:
    """A round is a pair on one machine: when `ab --resume` finds round r unfinished and a side of it measured on
    another machine (a new GPU lease is often another host: the same Kimi-rank config stepped 25% slower on the
    second H100 of 2026-12-07), that side's folder moves to OUT/set-aside/ and both sides run again here. Sides
    whose sessions predate host identities (2026-12-07) cannot be told apart and stay."""
    dirs = [out / side / f"round-{r}" for side in ("baseline", "candidate")]
    measured = [_measured_machines(d) for d in dirs]
    if all(done for _, done in measured):
        return []
    here = {"host": host_identity()}
    moved = []
    for d, (sessions, _) in zip(dirs, measured, strict=True):
        if any(same_machine(s, here) is False for s in sessions):
            dest = out / "set-aside" / d.parent.name / f"{d.name}-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}"
            dest.parent.mkdir(parents=True, exist_ok=True)
            d.rename(dest)
            moved.append(dest)
            print(f"round {r + 1}: {d} was measured on another machine: moved to {dest}, both sides run here",
                  file=sys.stderr, flush=True)  # fmt: skip
    return moved


def _round(
    r: int,
    total: int,
    a: Env,
    b: Env,
    out: Path,
    profile: str,
    repeat: int,
    ray: str | None,
    warm: dict[str, bool] | None = None,
    extra: Sequence[str] = (),
) -> None:
    """Round r: both sides' sweeps, in the order A B on even rounds and B A on odd ones, sent the same prompts
    (one salt a round: `round_salt`), so that a text workload's sides get the same conversations."""
    from bench.distributed import ab_rounds

    salt = round_salt(out, r)
    warm = {} if warm is None else warm
    order = [("baseline", a), ("candidate", b)] if r % 2 == 0 else [("candidate", b), ("baseline", a)]
    if ray is None:  # on Ray the sessions are the driver's; the nodes that measure are pinned (--ray-same-nodes)
        set_aside_other_machine(out, r)
    for side, env in order:
        if env.patch and _run(env, ["patch", *env.patch_args()]) != 0:
            raise BenchError(f"could not set {env.label()} before round {r}")
        round_dir = out / side / f"round-{r}"
        resume = (round_dir / "manifest.json").exists()  # `ab --resume`: only what that sweep lacks runs
        # each side's first sweep this call that starts a server (a finished one starts none): the sides may differ
        # in what vLLM's compile cache hashes (a patch, a VLLM_* variable), so each warms its own
        warm_here = warm.get(side, False) and not _measured_machines(round_dir)[1]
        if warm_here:
            warm[side] = False
        print(
            f"round {r + 1}/{total}: {side} ({env.label()}){' resumed' if resume else ''}", file=sys.stderr, flush=True
        )
        rc = _run(
            env,
            [
                "sweep",
                profile,
                "--out",
                str(round_dir),
                *(["--resume"] if resume else []),
                *(["--warm-start"] if warm_here else []),
                *extra,  # e.g. --check-outputs N
                "--quiet",
                "--repeat",
                str(repeat),
                "--starts",  # a round is one server start a side: the rounds are the A/B's units
                "1",
                "--draft-keys",
                env.draft_keys,
                "--prompt-salt",
                salt,
                *(ab_rounds.sweep_args(ray, out, r, order[0][0] if side != order[0][0] else None) if ray else []),
            ],
        )
        if rc not in (ExitCode.OK, ExitCode.POINTS_FAILED):  # failed points are data; compare gates them
            raise BenchError(f"{side} round {r} failed (exit {rc})")
        if ray is not None:
            ab_rounds.check_side(out, side, r)
