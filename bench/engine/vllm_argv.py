"""A server command line checked by the installed vLLM's own argument parser, before any server starts: a flag
this vLLM does not have, a `--no-X` for a flag that only turns something on, a value its type refuses. The dry run
shows the verdict per server; nothing here starts vLLM (importing its parser takes a few seconds, once).

The parser's module moved between releases (0.26: vllm.entrypoints.openai.cli_args; 0.32:
vllm.entrypoints.launchers.cli_args); without either, the check says it could not run, never that a command is
fine."""

from __future__ import annotations

import contextlib
import functools
import importlib
import io

PARSER_MODULES = ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.launchers.cli_args")
ENTRY = "vllm.entrypoints.openai.api_server"  # what bench.engine.server launches: argv[1:3] = ["-m", ENTRY]


@functools.lru_cache(maxsize=1)
def _parser():
    """(vLLM's server argument parser, its version) or (None, why not)."""
    try:
        import vllm
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except Exception as exc:
        return None, f"vLLM not importable here ({type(exc).__name__})"
    for name in PARSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.make_arg_parser(FlexibleArgumentParser()), vllm.__version__
    return None, f"vLLM {vllm.__version__}: no server argument parser in {', '.join(PARSER_MODULES)}"


def check(argv: list[str]) -> tuple[bool, str]:
    """(checked, message) for a server command line as bench.engine.server.server_argv builds it: (True, "") when vLLM's
    parser takes it, (True, its complaint) when it refuses it, (False, why) when no parser could be had."""
    parser, version = _parser()
    if parser is None:
        return False, version
    args = argv[argv.index(ENTRY) + 1 :] if ENTRY in argv else argv
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser.parse_args(args)
        except SystemExit:
            lines = [line for line in err.getvalue().splitlines() if "error:" in line]
            return True, f"vLLM {version} refuses it: " + (lines[-1].split("error:", 1)[1].strip() if lines else "?")
    return True, ""


def version() -> str | None:
    """The version whose parser `check` uses (None: none)."""
    parser, v = _parser()
    return v if parser is not None else None
