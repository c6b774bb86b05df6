"""Command line: argv -> typed arguments -> one library function per command. Errors are caught once, here.

A command parses, calls, and prints what came back; what a command does lives in the library (bench.commands.sweep,
bench.commands.profile_point, bench.patching, ...), where it can be tested without a process.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from bench.cli_parser import build_parser
from bench.core.errors import BenchError, ExitCode
from bench.core.files import atomic_write_bytes

__all__ = ["NO_NSYS", "build_parser", "main"]

NO_NSYS = (
    "nsys not found: using the in-process timing mode (CPU time per range, GPU time via CUDA events where a GPU exists)"
)


def cmd_patch(args: argparse.Namespace) -> int:
    from bench import patching
    from bench.patching.manager import build_manifest_hashes

    if args.action == "manifest":
        print(build_manifest_hashes(args.series_dir, args.pristine))
        return 0
    install = patching.locate_vllm(args.vllm_root)
    if args.action in ("apply", "revert"):
        if args.action == "apply":
            outcome = patching.apply_series(
                install, args.series, dry_run=args.dry_run, only=args.only, exclude=args.exclude
            )
        else:
            outcome = patching.revert_series(install, args.series, dry_run=args.dry_run)
        if outcome.diff:
            print(outcome.diff, end="")
        print(outcome.message)
        return 0
    report = patching.patch_report(install, args.series)
    if args.action == "status" and args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(patching.format_status(report))
    if args.action == "verify":
        left_out = patching.left_out_fixes(install, args.series, args.only, args.exclude)
        if left_out:
            skipped = patching.check_selection(report, left_out)
            what = f"every fix but {', '.join(left_out)} is in the code, and those are not"
        else:
            skipped = patching.check_verified(report)
            what = "every fix is in the code"
        print(f"verified: {what}" + (f" (not applicable here: {', '.join(skipped)})" if skipped else ""))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from bench.commands.sweep import SweepRequest, dry_run, sweep

    request = SweepRequest(
        profile=args.profile,
        out=args.out,
        platform=args.platform,
        points=[p.strip() for p in args.points.split(",") if p.strip()] if args.points else None,
        repeat=args.repeat,
        resume=args.resume,
        rerun_failed=args.rerun_failed,
        quiet=args.quiet,
        profile_points=args.profile_points,
        nsys=args.nsys,
        draft_keys=args.draft_keys,
        ray=args.ray,
        ray_same_nodes=args.ray_same_nodes,
        time_budget_s=args.time_budget,
        prompt_salt=args.prompt_salt,
        starts=args.starts,
        warm_start=args.warm_start,
        check_outputs=args.check_outputs,
    )
    if args.dry_run:
        print(dry_run(request))
        return ExitCode.OK
    outcome = sweep(request)
    if outcome.report is not None:
        print(f"report: {outcome.report}")
    counts = outcome.counts
    print(
        f"results: {outcome.root}  ({counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
        + (f", {outcome.left} not run: time budget spent, --resume runs them" if outcome.left else "")
        + ")"
    )
    if outcome.capture_error is not None:
        print(f"error: {outcome.capture_error}", file=sys.stderr)
    if counts["failed"]:
        return ExitCode.POINTS_FAILED
    if outcome.left:
        return ExitCode.INCOMPLETE
    return ExitCode.CAPTURE_FAILED if outcome.capture_error is not None else ExitCode.OK


def cmd_load(args: argparse.Namespace) -> int:
    from bench.commands.load_url import LoadRequest, load_url

    points = [p.strip() for p in args.points.split(",") if p.strip()] if args.points else None
    request = LoadRequest(
        url=args.url,
        profile=args.profile,
        out=args.out,
        model=args.model,
        points=points,
        repeat=args.repeat,
        quiet=args.quiet,
        server_log=args.server_log,
    )
    outcome = load_url(request)
    if outcome.report is not None:
        print(f"report: {outcome.report}")
    print(f"results: {outcome.root}  ({outcome.counts['ok']} ok, {outcome.counts['failed']} failed)")
    return 0 if not outcome.counts["failed"] else 3


def cmd_report(args: argparse.Namespace) -> int:
    from bench.config.slo import parse_slo
    from bench.measure.recompute import recompute
    from bench.report.build import build_report
    from bench.report.starts import build_starts_report, start_dirs

    if args.update and not args.check:
        raise BenchError("report --update goes with --check (it rewrites what the check finds different)")
    if args.check:
        return _check_reports(args)
    slo = parse_slo(args.slo) if args.slo else None  # checked before anything is recomputed or written
    starts = start_dirs(args.sweep_dir) if not (args.sweep_dir / "manifest.json").exists() else []
    for sweep_dir in starts or [args.sweep_dir]:  # a folder of starts (sweep --starts): each start, then starts.md
        if args.recompute:
            print(f"{sweep_dir}: recomputed {len(recompute(sweep_dir))} point(s) from their raw records")
        for name, path in build_report(sweep_dir, None if starts else args.out, slo).items():
            print(f"{name}: {path}")
    if starts:
        for name, path in build_starts_report(args.sweep_dir).items():
            print(f"{name}: {path}")
    return 0


def _check_reports(args: argparse.Namespace) -> int:
    from bench.report.check import check_reports

    if args.out or args.slo or args.recompute:
        raise BenchError("report --check rebuilds the committed reports as they are: no --out, --slo or --recompute")
    checked = check_reports(args.sweep_dir, update=args.update)
    if not checked.reports:
        raise BenchError(f"{args.sweep_dir}: no results directory with a report/ and no folder of starts under it")
    for difference in checked.differences:
        print(difference)
    print(
        f"{args.sweep_dir}: {checked.reports} report(s), {checked.files} committed file(s) compared with their "
        f"rebuild; {len(checked.differences)} differ" + (" (rewritten: review the diff)" if args.update else "")
    )
    return ExitCode.REPORT_DIFFERS if checked.differences and not args.update else ExitCode.OK


def cmd_profile(args: argparse.Namespace) -> int:
    if args.target == "analyze":
        return _profile_analyze(args)
    if args.target == "shares":
        return _profile_shares(args)
    from bench.commands.profile_point import ProfileRequest, prepare_profile, run_profile

    job = prepare_profile(
        ProfileRequest(
            profile=args.target,
            point=args.point,
            nsys=args.nsys,
            no_nsys=args.no_nsys,
            out=args.out,
            num_prompts=args.num_prompts,
            quiet=args.quiet,
            ray=args.ray,
        )
    )
    if job.nsys is None:
        print(NO_NSYS, file=sys.stderr)
    outcome = run_profile(job)
    print(f"report: {outcome.report_html or 'not built (see the log above); rebuild with bench report'}")
    for item in outcome.captures:
        print(json.dumps(item, indent=2, default=str))
    if outcome.point_error is not None:
        print(f"error: point {job.point.id} {outcome.point_error}; results: {outcome.root}", file=sys.stderr)
    if outcome.capture_error is not None:
        print(f"error: capture failed: {outcome.capture_error}", file=sys.stderr)
    if outcome.point_error is not None:
        return ExitCode.POINTS_FAILED
    if outcome.capture_error is not None:
        return ExitCode.CAPTURE_FAILED
    print(f"results: {outcome.root}")
    return ExitCode.OK


def _profile_analyze(args: argparse.Namespace) -> int:
    # straight to the analysis: the sweep's modules (plan, models, ...) are not imported for it
    from pathlib import Path

    from bench.profiling.nsys_analysis import analyze

    if len(args.file) != 1:
        raise BenchError("profile analyze needs one FILE (an nsys .sqlite or .sqlite.xz export)")
    export = Path(args.file[0])
    out = args.out or export.parent / (export.name.split(".")[0] + "-analysis")
    result = analyze(export, out, plot=not args.no_plot, verify=args.verify)
    for name, path in result["paths"].items():
        print(f"{name}: {path}")
    for warning in result["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if why := result["headline"].get("step_shares_missing"):
        print(f"no decode-step shares: {why}", file=sys.stderr)
    if (why := result["headline"].get("step_paths_missing")) and not result["headline"].get("step_shares_missing"):
        print(f"no decode-step split by path: {why}", file=sys.stderr)
    return 0


def _profile_shares(args: argparse.Namespace) -> int:
    from bench.profiling.step_paths import paths_report, read_paths
    from bench.profiling.step_shares import analysis_folder, read_shares, shares_report

    if not args.file:
        raise BenchError("profile shares needs one or more analysis folders")
    text = shares_report({str(d): read_shares(d) for d in args.file})
    by_path = {str(d): read_paths(analysis_folder(d)) for d in args.file}
    text += paths_report({label: p for label, p in by_path.items() if p is not None})
    print(text, end="")
    if args.out:
        atomic_write_bytes(args.out / "step-shares.md", text.encode())
        print(f"written: {args.out / 'step-shares.md'}", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from bench.verdicts.compare import compare_dirs, compare_markdown, outcome

    result = compare_dirs(
        args.baseline,
        args.candidate,
        min_effect=args.min_effect,
        alpha=args.alpha,
        max_effect=args.max_effect,
        correction=args.correction,
        paired=args.paired,
        across_methods=args.across_methods,
    )
    text = compare_markdown(result, args.out.parent if args.out else None)
    print(text)
    if args.out:
        atomic_write_bytes(args.out, text.encode())
    code, line = outcome(result)
    print(line, file=sys.stderr)
    return ExitCode.OK if args.no_gate else code


def cmd_ab(args: argparse.Namespace) -> int:
    from bench.commands.ab import parse_env, run_ab

    if not args.candidate and not args.calibrate:
        raise BenchError("ab: --candidate ENV is required (or --calibrate, an A/A of the baseline)")
    baseline = parse_env(args.baseline, args.baseline_env)
    return run_ab(
        args.profile,
        baseline,
        parse_env(args.candidate, args.candidate_env) if args.candidate else baseline,
        rounds=args.rounds,
        out=args.out,
        repeat=args.repeat,
        alpha=args.alpha,
        min_effect=args.min_effect,
        max_effect=args.max_effect,
        correction=args.correction,
        paired=args.paired is not False,  # ab pairs by round unless --unpaired
        expected_noise=args.expected_noise,
        ray=args.ray,
        calibrate=args.calibrate,
        max_rounds=args.max_rounds,
        resume=args.resume,
        warm_start=args.warm_start,
        check_outputs=args.check_outputs,
    )


def cmd_models(args: argparse.Namespace) -> int:
    from bench.models.models import write_tiny_models

    if args.action == "kimi-rank":
        from bench.models import kimi_rank

        spec = kimi_rank.RankSpec(args.tp, args.layers, args.experts)
        print(kimi_rank.estimate(spec).table())
        rank = kimi_rank.write_checked(args.dir, spec, args.gpu_memory_gib, args.force)
        print(f"{spec.name}: target {rank.target}, draft {rank.draft} (serve with --load-format dummy)")
        return 0

    models = write_tiny_models(args.dir, None if args.flavor == "auto" else args.flavor, args.weights, args.seed)
    print(f"tiny {models.flavor} models ({models.weights} weights): target {models.target}, draft {models.draft}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from bench.results.migrate import migrate

    for root in args.dirs:
        steps = migrate(root)
        what = "; ".join(f"{s['from']} -> {s['to']}: {s['changed'] or 'nothing to change'}" for s in steps)
        print(f"{root}: {what or 'already current'}")
    return 0


COMMANDS = {
    "patch": cmd_patch,
    "sweep": cmd_sweep,
    "load": cmd_load,
    "models": cmd_models,
    "report": cmd_report,
    "compare": cmd_compare,
    "profile": cmd_profile,
    "ab": cmd_ab,
    "migrate": cmd_migrate,
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
        return ExitCode.OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
