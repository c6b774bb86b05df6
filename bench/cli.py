"""Command line: argv -> typed arguments -> one function per command. Errors are caught once, here."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from bench.errors import BenchError, NotImplementedYet

LATER = {"sweep": "the sweep", "profile": "profiling", "report": "reports", "compare": "comparisons",
         "models": "model generation"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=(
        "Benchmark and profile vLLM speculative decoding (EAGLE3 drafts on MLA models)."))
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    patch = sub.add_parser("patch", help="apply, verify and revert the Kimi EAGLE3 draft fixes in a vLLM install")
    patch_sub = patch.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in [("status", "show each fix: applied / not applied / already upstream / cannot apply"),
                       ("apply", "apply the series for this vLLM (all or nothing)"),
                       ("revert", "restore the original files (checked by hash)"),
                       ("verify", "exit 0 only if every fix is applied or upstream")]:
        p = patch_sub.add_parser(name, help=text)
        p.add_argument("--vllm-root", type=Path, help="a vllm/ folder or the folder holding it "
                       "(default: the importable vllm)")
        p.add_argument("--series", help="patch series name (default: picked by the vLLM version)")
        if name in ("apply", "revert"):
            p.add_argument("--dry-run", action="store_true", help="show the diff, write nothing")
        if name == "status":
            p.add_argument("--json", action="store_true", help="machine-readable output")
    manifest = patch_sub.add_parser("manifest", help="(maintainers) print a series' file hashes from a pristine tree")
    manifest.add_argument("series_dir", type=Path)
    manifest.add_argument("--pristine", type=Path, required=True, help="folder holding the unpatched vllm/")

    for name, what in LATER.items():
        p = sub.add_parser(name, help=f"{what} (not yet implemented)")
        p.add_argument("rest", nargs=argparse.REMAINDER)
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
    lines = [f"vLLM {report['vllm_version']} ({report['distribution']}) at {report['vllm_root']}",
             f"series: {report['series'] or '-'}" + (f"  ({report['problem']})" if report["problem"] else "")]
    for fix in report["fixes"]:
        probe = {True: "code has it", False: "code lacks it", None: "no such code path"}[fix["in_code"]]
        detail = f"; {fix['detail']}" if fix["detail"] else ""
        lines.append(f"  {fix['fix']:<20} {fix['state']:<17} ({probe}{detail})")
    if report["record"]:
        last = report["record"][-1]
        lines.append(f"last recorded action: {last.get('action')} series {last.get('series')} at {last.get('time')}")
    return "\n".join(lines)


def cmd_later(args: argparse.Namespace) -> int:
    raise NotImplementedYet(f"'{args.command}' is not yet implemented ({LATER[args.command]} comes in a later issue)")


COMMANDS = {"patch": cmd_patch}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return COMMANDS.get(args.command, cmd_later)(args)
    except BenchError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
