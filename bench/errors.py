"""The one user-facing error type. The CLI catches it once and prints its message."""


class BenchError(Exception):
    """A problem the user can fix; the message is shown as one line, without a traceback."""

    exit_code = 1
