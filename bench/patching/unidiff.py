"""A strict unified-diff applier: every context and removed line must match exactly, no fuzz.

Strict on purpose: the series manifest pins each file's hash before and after, so any drift is an error,
never something to paper over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.core.errors import BenchError

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    old_start: int
    new_start: int
    lines: list[tuple[str, str]] = field(default_factory=list)  # (tag in " -+", text without newline)

    def reversed(self) -> Hunk:
        swap = {" ": " ", "-": "+", "+": "-"}
        return Hunk(self.new_start, self.old_start, [(swap[t], s) for t, s in self.lines])


@dataclass
class FileDiff:
    path: str  # relative to the folder that holds vllm/
    hunks: list[Hunk]

    def reversed(self) -> FileDiff:
        return FileDiff(self.path, [h.reversed() for h in self.hunks])


def parse_patch(text: str, name: str) -> list[FileDiff]:
    files: list[FileDiff] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FileDiff(_strip_prefix(lines[i + 1][4:]), []))
            i += 2
            continue
        match = _HUNK_RE.match(line)
        if match:
            if not files:
                raise BenchError(f"{name}: hunk before any file header (line {i + 1})")
            hunk = Hunk(int(match.group(1)), int(match.group(3)))
            old_left = int(match.group(2) or 1)
            new_left = int(match.group(4) or 1)
            i += 1
            while old_left > 0 or new_left > 0:
                if i >= len(lines):
                    raise BenchError(f"{name}: hunk ends early in {files[-1].path}")
                tag, body = (lines[i][:1] or " "), lines[i][1:]
                if tag not in " -+":
                    raise BenchError(f"{name}: bad line {i + 1} in hunk: {lines[i]!r}")
                hunk.lines.append((tag, body))
                old_left -= tag in " -"
                new_left -= tag in " +"
                i += 1
            files[-1].hunks.append(hunk)
            continue
        if line.startswith("\\"):
            raise BenchError(f"{name}: 'No newline at end of file' is not supported (line {i + 1})")
        i += 1
    if not files:
        raise BenchError(f"{name}: no file diffs found")
    return files


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def apply_file_diff(original: str, diff: FileDiff) -> str:
    """The new text; raises BenchError naming the file and hunk when the text does not match."""
    old = original.split("\n")
    out: list[str] = []
    pos = 0  # index into old of the next line not yet copied
    for n, hunk in enumerate(diff.hunks, 1):
        start = hunk.old_start - 1 if hunk.old_start > 0 else 0
        expected = [s for t, s in hunk.lines if t in " -"]
        if start < pos or old[start : start + len(expected)] != expected:
            raise BenchError(f"{diff.path}: hunk {n} (line {hunk.old_start}) does not match the file")
        out.extend(old[pos:start])
        out.extend(s for t, s in hunk.lines if t in " +")
        pos = start + len(expected)
    out.extend(old[pos:])
    return "\n".join(out)
