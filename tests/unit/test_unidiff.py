import pytest

from bench.core.errors import BenchError
from bench.patching.unidiff import apply_file_diff, parse_patch

ORIGINAL = "a\nb\nc\nd\ne\nf\ng\n"
PATCH = """--- a/vllm/x.py
+++ b/vllm/x.py
@@ -1,4 +1,5 @@
 a
-b
+B
+b2
 c
 d
@@ -6,2 +7,2 @@
 f
-g
+G
"""


def test_apply_and_reverse_round_trip():
    (diff,) = parse_patch(PATCH, "t.patch")
    assert diff.path == "vllm/x.py"
    new = apply_file_diff(ORIGINAL, diff)
    assert new == "a\nB\nb2\nc\nd\ne\nf\nG\n"
    assert apply_file_diff(new, diff.reversed()) == ORIGINAL


def test_mismatch_names_file_and_hunk():
    (diff,) = parse_patch(PATCH, "t.patch")
    with pytest.raises(BenchError, match=r"vllm/x.py: hunk 2 \(line 6\) does not match"):
        apply_file_diff(ORIGINAL.replace("g", "z"), diff)


def test_applying_twice_fails_instead_of_duplicating():
    (diff,) = parse_patch(PATCH, "t.patch")
    with pytest.raises(BenchError):
        apply_file_diff(apply_file_diff(ORIGINAL, diff), diff)


@pytest.mark.parametrize(
    "text, message",
    [
        ("nothing here\n", "no file diffs"),
        ("@@ -1 +1 @@\n-a\n+b\n", "hunk before any file header"),
        ("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n", "hunk ends early"),
    ],
)
def test_malformed_patches(text, message):
    with pytest.raises(BenchError, match=message):
        parse_patch(text, "bad.patch")
