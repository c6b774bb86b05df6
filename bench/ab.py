"""`bench ab`: the same profile against two vLLM environments, interleaved (A B, B A, A B, ...) so that drift
hits both sides alike, into one comparison. An environment is a Python interpreter (or venv) with the suite
importable, optionally with the patch state to set before each of its runs."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, ExitCode
from bench.files import atomic_write_bytes
from bench.fmt import md_rows
from bench.hardware import detect_machine
from bench.sides import AbSide, write_ab_side
from bench.stats import CPU_AA_BETWEEN_CV, look_level, plan_design

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Env:
    python: str
    patch: str | None  # "patched", "unpatched" or None (leave as is)
    variables: tuple[tuple[str, str], ...] = ()  # set for its runs, servers included (e.g. BENCH_STEP_DELAY_MS)

    @property
    def draft_keys(self) -> str:
        # Unpatched vLLM rejects the draft_* keys: hand it vLLM's own names for the same settings.
        return "upstream" if self.patch == "unpatched" else "legacy"

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
    path, _, patch = spec.partition(":")
    if patch not in ("", "patched", "unpatched"):
        raise BenchError(f"environment {spec!r}: the suffix must be :patched or :unpatched")
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
    rounds: int,
    out: Path | None,
    repeat: int = 1,
    alpha: float = 0.05,
    min_effect: float = 0.02,
    max_effect: float = 0.05,
    correction: str = "holm",
    paired: bool = False,
    expected_noise: float | None = None,
    ray: str | None = None,
    calibrate: bool = False,
    max_rounds: int | None = None,
    resume: bool = False,
) -> int:
    """Each round starts one server per engine config on each side: rounds = server starts a side, the unit of
    the comparison. Refuses a design that cannot reach alpha; says what change it can detect before running, at
    `expected_noise`, else at this machine's calibration of the profile (bench.calibration), else at the default.
    `calibrate`: an A/A (b is a) whose between-start noise is stored for later plans. `max_rounds`: sequential, a
    look after every round from `rounds` on at its O'Brien-Fleming level (`sequential_levels`), stopping at the
    first look that decides (regression or pass); every look is kept in looks.json and compare.md.
    `ray`: each sweep runs on that cluster (`sweep --ray`; bench.distributed.ab_rounds says what else).
    `resume`: continue the A/B already in `out` (a run cut by a time limit): each round's sweep resumes where it
    stopped (`sweep --resume`: a finished one starts no server), so only what is missing runs."""
    from bench.distributed import ab_rounds

    if calibrate and b != a:  # its spread would be stored as this machine's noise, the A/B's effect included
        raise BenchError("ab --calibrate runs an A/A of the baseline: give no --candidate (calibrate, then compare)")
    if ray is not None:
        ab_rounds.check_envs([a.patch, b.patch])
        if calibrate:  # the cluster's nodes, not this machine, would be measured and the key would name this one
            raise BenchError("ab --calibrate --ray is not supported: a calibration is kept per machine, not cluster")
    if resume and (out is None or not Path(out).is_dir()):
        raise BenchError(f"ab --resume needs --out, the folder of the A/B to continue ({out} is not one)")
    out = Path(out or REPO / "reports" / f"ab-{Path(profile).stem}-{dt.datetime.now():%Y%m%d-%H%M%S}")
    if not resume and ((out / "baseline").exists() or (out / "candidate").exists()):
        raise BenchError(f"{out} already holds an A/B run (--resume continues it)")
    from bench import calibration
    from bench.compare import GATED
    from bench.plan import plan_sweep

    planned = plan_sweep(profile, dry_run=True)
    profile_key = calibration.profile_key(planned.profile, repeat)
    if expected_noise is None and ray is not None:
        expected_noise = CPU_AA_BETWEEN_CV
        print(f"ab noise: no calibration on a Ray cluster: planning with {expected_noise:.1%}", file=sys.stderr)
    elif expected_noise is None:
        expected_noise, why = calibration.planning_noise(profile_key, detect_machine(), CPU_AA_BETWEEN_CV)
        print(f"ab noise: {why}", file=sys.stderr, flush=True)
    tests = len(planned.runnable) * len(GATED)  # each point is gated on every GATED metric
    levels = _looks(rounds, max_rounds, alpha, tests, correction, paired)
    design = _design(rounds, levels, alpha, expected_noise, max_effect, tests, correction, paired)
    print(f"ab design: {design}", file=sys.stderr, flush=True)
    gate = {"min_effect": min_effect, "max_effect": max_effect, "correction": correction, "paired": paired}
    ab_salt(out, planned.profile.run.prompt_salt)  # after the design's checks: a refused A/B writes nothing
    for side, env in (("baseline", a), ("candidate", b)):  # what this A/B set per side, for compare.md
        write_ab_side(out / side, AbSide(python=env.python, patch=env.patch, variables=dict(env.variables)))
    result, looks = _run_rounds(max_rounds or rounds, levels, alpha, gate, a, b, out, profile, repeat, ray)
    code = _write_compare(out, result, looks, ray)
    if calibrate:
        _store_calibration(out, profile_key)
        return ExitCode.OK if code != ExitCode.GATE_FAILED else code  # an A/A that "regressed" says so
    return code


def _looks(
    rounds: int, max_rounds: int | None, alpha: float, tests: int, correction: str, paired: bool
) -> dict[int, float]:
    """The sequential looks of `--max-rounds` ({} for a fixed design); refuses a plan in which no look can decide."""
    if max_rounds is None:
        return {}
    if max_rounds < rounds:
        raise BenchError(f"ab --max-rounds {max_rounds} is below --rounds {rounds}")
    levels = sequential_levels(rounds, max_rounds, alpha, tests, correction, paired)
    if not levels:
        raise BenchError(
            f"ab --rounds {rounds} --max-rounds {max_rounds}: no look can reach its spent alpha at {tests} gated "
            "tests; raise --max-rounds"
        )
    if (last := max(levels)) < max_rounds:  # the rounds after it would run and never be judged
        unjudged = f"round {max_rounds}" if last + 1 == max_rounds else f"rounds {last + 1}-{max_rounds}"
        raise BenchError(
            f"ab --rounds {rounds} --max-rounds {max_rounds}: the look after round {max_rounds} cannot reach the "
            f"alpha left for it at {tests} gated tests, so {unjudged} would run unjudged; use "
            f"--max-rounds {last}, or more rounds"
        )
    return levels


def _design(
    rounds: int,
    levels: dict[int, float],
    alpha: float,
    noise: float,
    max_effect: float,
    tests: int,
    correction: str,
    paired: bool,
) -> str:
    """The design sentence printed before any server starts; a fixed design that cannot reach alpha is refused."""
    if levels:
        return sequential_design(levels, noise, max_effect, tests, correction, paired)
    reachable, design = plan_design(rounds, alpha, noise, max_effect, tests, correction, paired=paired)
    if not reachable:
        raise BenchError(f"ab --rounds {rounds}: {design}")
    return design


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
) -> tuple[dict, list[dict]]:
    """Run the rounds; after each round that has a look, judge at its level and stop at the first that decides
    (regression or pass). Returns the last judgement (at `alpha` when no look was taken) and the looks, each also
    kept in looks.json as it is taken."""
    from bench.compare import compare_dirs, outcome

    def judge(level: float) -> dict:
        return compare_dirs(out / "baseline", out / "candidate", alpha=level, **gate)

    looks: list[dict] = []
    result: dict | None = None
    for r in range(total):
        _round(r, total, a, b, out, profile, repeat, ray)
        if (level := levels.get(r + 1)) is None:
            continue
        result = judge(level)
        code, line = outcome(result)
        looks.append({"rounds": r + 1, "level": level, "exit": int(code), "outcome": line})
        atomic_write_bytes(out / "looks.json", json.dumps(looks, indent=1).encode())
        print(f"look after round {r + 1} (level {level:.3g}): {line}", file=sys.stderr, flush=True)
        if code in (ExitCode.OK, ExitCode.GATE_FAILED):
            break
    return (result if result is not None else judge(alpha)), looks


def _write_compare(out: Path, result: dict, looks: list[dict], ray: str | None) -> int:
    """compare.md (with the Ray nodes and the sequential looks when there are some), printed; returns the exit code."""
    from bench.compare import compare_markdown, outcome
    from bench.distributed import ab_rounds

    text = compare_markdown(result, out)
    if ray is not None:
        text += ab_rounds.nodes_markdown(out, len(list((out / "baseline").glob("round-*"))))
    if looks:
        rows = ([k["rounds"], f"{k['level']:.3g}", k["exit"], k["outcome"]] for k in looks)
        text += "\n## Sequential looks\n\n" + "\n".join(md_rows(["rounds", "level", "exit", "outcome"], rows)) + "\n"
    atomic_write_bytes(out / "compare.md", text.encode())
    print(text)
    code, line = outcome(result)
    print(line, file=sys.stderr)
    return code


def _store_calibration(out: Path, profile_name: str) -> None:
    """`ab --calibrate`: the between-start noise of this A/A, stored for later plans on this machine."""
    from bench import calibration
    from bench.compare import GATED, load_side

    base, cand = load_side(out / "baseline"), load_side(out / "candidate")
    sides = {p: base[p].servers + cand[p].servers for p in set(base) & set(cand)}
    entry = {"profile": profile_name, **calibration.measure(sides, GATED)}
    path = calibration.save(profile_name, detect_machine(), entry)
    atomic_write_bytes(out / "calibration.json", json.dumps(entry, indent=1).encode())
    found = entry["metrics"].get(calibration.PLAN_METRIC)
    print(
        f"calibration: {found['max_cv']:.1%} between starts at the noisiest point (median {found['median_cv']:.1%})"
        f" over {entry['starts_per_point']} starts a point, stored in {path}"
        if found
        else "calibration: too few starts to measure the noise (nothing stored)",
        file=sys.stderr,
    )


def sequential_design(
    levels: dict[int, float], noise: float, max_effect: float, tests: int, correction: str, paired: bool
) -> str:
    """The sentence `ab --max-rounds` prints: its looks, and the change it detects at its last look's own level,
    not at alpha. The levels are alpha spent in pieces, so the fixed design's figure overstates the procedure's
    power (74% instead of 80% at 7 -> 10 rounds, 20 points: reports/examples/verdict-simulation); the last look
    alone reaches 80% at this effect, and the earlier looks only add to it."""
    last_round = max(levels)
    _, design = plan_design(last_round, levels[last_round], noise, max_effect, tests, correction, paired=paired)
    looks_text = ", ".join(f"{n} ({lv:.2g})" for n, lv in levels.items())
    return f"sequential: looks after rounds {looks_text} (O'Brien-Fleming alpha spending); at most {design}"


def sequential_levels(
    rounds: int, max_rounds: int, alpha: float, tests: int, correction: str, paired: bool
) -> dict[int, float]:
    """{rounds after which a look is taken: its family level}: every round from `rounds` to `max_rounds` whose
    spent alpha an exact test can reach (bench.stats.look_level; a skipped look spends nothing)."""
    levels, spent = {}, 0.0
    for n in range(rounds, max_rounds + 1):
        level = look_level(n, max_rounds, alpha, spent, tests, correction, paired)
        if level is not None:
            levels[n] = level
            spent += level
    return levels


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
    from bench.prompts import new_salt

    salt = pinned or new_salt()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, salt.encode())
    return salt


def round_salt(out: Path, r: int) -> str:
    """The prompt salt of round r, both sides': the A/B's salt (`ab_salt`) and the round. Each round's sides are
    new server starts, so the same prompts on both hit no cache; the next round draws fresh ones."""
    return f"{ab_salt(out)}-r{r}"


def _round(r: int, total: int, a: Env, b: Env, out: Path, profile: str, repeat: int, ray: str | None) -> None:
    """Round r: both sides' sweeps, in the order A B on even rounds and B A on odd ones, sent the same prompts
    (one salt a round: `round_salt`), so that a text workload's sides get the same conversations."""
    from bench.distributed import ab_rounds

    salt = round_salt(out, r)
    order = [("baseline", a), ("candidate", b)] if r % 2 == 0 else [("candidate", b), ("baseline", a)]
    for side, env in order:
        if env.patch and _run(env, ["patch", "apply" if env.patch == "patched" else "revert"]) != 0:
            raise BenchError(f"could not set {env.label()} before round {r}")
        round_dir = out / side / f"round-{r}"
        resume = (round_dir / "manifest.json").exists()  # `ab --resume`: only what that sweep lacks runs
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
                "--quiet",
                "--repeat",
                str(repeat),
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
