"""The one user-facing error type, and the exit codes of every command in one table (the CLI's --help epilog is
built from it; a test checks that docs/cli.md lists the same codes)."""

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    USER_ERROR = 1
    USAGE = 2
    POINTS_FAILED = 3
    GATE_FAILED = 4
    CAPTURE_FAILED = 5
    INCONCLUSIVE = 6
    INCOMPLETE = 7
    REPORT_DIFFERS = 8
    INTERRUPTED = 130


EXIT_CODE_MEANINGS = {
    ExitCode.OK: "success",
    ExitCode.USER_ERROR: "user error (one line on stderr; --debug shows the traceback)",
    ExitCode.USAGE: "command-line usage error",
    ExitCode.POINTS_FAILED: "sweep / profile: some points failed (their records and the report say why)",
    ExitCode.GATE_FAILED: "compare / ab: a gated metric regressed, or candidate points failed or are missing",
    ExitCode.CAPTURE_FAILED: "profile / sweep --profile-points: a capture errored or recorded no bench.* range "
    "(3 wins when points failed too)",
    ExitCode.INCONCLUSIVE: "compare / ab: no regression found, but the data cannot rule one out: a gated metric had too "
    "few server starts, its detectable effect exceeds --max-effect, a compared server start is flagged, or a point has "
    "no ok baseline to judge it against (never a pass)",
    ExitCode.INCOMPLETE: "sweep --time-budget: the budget ran out before every point ran (--resume runs the rest; "
    "3 wins when points failed)",
    ExitCode.REPORT_DIFFERS: "report --check: a rebuilt report file differs from the committed one",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGTERM); finished points are kept",
}


def exit_code_text() -> str:
    """The table as the --help epilog shows it."""
    return "exit codes:\n" + "\n".join(f"  {int(code):<4} {EXIT_CODE_MEANINGS[code]}" for code in ExitCode)


class BenchError(Exception):
    """A problem the user can fix; the message is shown as one line, without a traceback."""

    exit_code = ExitCode.USER_ERROR
