"""The real 0.26.0 `_build_draft_attn_metadata`, imported from the unpacked wheel on this CPU machine (its pure
Python runs on the installed torch; the Triton kernel runs under TRITON_INTERPRET=1), called with cp_size > 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.models.dcp_local import local_len
from bench.patching import apply_series, locate_vllm
from tests.conftest import HELPERS, copy_tree, vllm_env

pytestmark = pytest.mark.slow

CASES = [
    {"seq_lens": [1, 2, 7, 16, 33, 100, 129], "cp_size": 2, "cp_interleave": 1, "num_reqs_padded": 8},
    {"seq_lens": [5, 64, 17, 300], "cp_size": 4, "cp_interleave": 16, "num_reqs_padded": 4},
    {"seq_lens": [1, 63, 64, 65, 1000], "cp_size": 8, "cp_interleave": 8, "num_reqs_padded": 6},
]


def run_probe(site, tmp_path):
    cases = [{**c, "cp_rank": r} for c in CASES for r in range(c["cp_size"])]
    env = {**vllm_env(tmp_path), "PYTHONPATH": str(site), "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(HELPERS / "dcp_probe.py"), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["vllm_version"] == "0.26.0" and out["speculator_file"].startswith(str(site))
    return cases, out["results"]


def test_patched_passes_local_seq_lens_for_every_rank(wheel_026, tmp_path):
    site = copy_tree(wheel_026, tmp_path / "site")
    apply_series(locate_vllm(site))
    cases, results = run_probe(site, tmp_path)
    for case, got in zip(cases, results):
        n = len(case["seq_lens"])
        want = [local_len(L, case["cp_size"], case["cp_rank"], case["cp_interleave"]) for L in case["seq_lens"]]
        want += [0] * (case["num_reqs_padded"] - n)
        assert got["dcp_local_seq_lens"] == want, case
        assert got["seq_lens"][:n] == case["seq_lens"]
    # Across ranks the local lengths add up to the whole sequence.
    for case in CASES:
        per_rank = [r["dcp_local_seq_lens"] for c, r in zip(cases, results) if c["seq_lens"] == case["seq_lens"]]
        assert [sum(col) for col in zip(*per_rank)][: len(case["seq_lens"])] == case["seq_lens"]


def test_unpatched_passes_none(wheel_026, tmp_path):
    site = copy_tree(wheel_026, tmp_path / "site")
    _, results = run_probe(site, tmp_path)
    assert all(r["dcp_local_seq_lens"] is None for r in results)
