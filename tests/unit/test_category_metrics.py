"""Acceptance per category: summed from the server's per-request numbers (histogram -> per position), else from
the category's own /metrics window, else from the point's window when it has one category; unknown stays None."""

from __future__ import annotations

import pytest

from bench.measure.metrics import acceptance, category_metrics, counter_delta, request_counts, spec_delta


def row(category: str, hist: list[int] | None, status: str = "ok", phase: str = "measure", conv: str = "c") -> dict:
    spec = {}
    if hist is not None:
        k = len(hist) - 1
        steps = sum(hist)
        spec = {
            "spec_steps": steps,
            "spec_draft_tokens": steps * k,
            "spec_accepted_tokens": sum(j * n for j, n in enumerate(hist)),
            "spec_histogram": hist,
        }
    return {
        "phase": phase,
        "status": status,
        "category": category,
        "conversation": conv,
        "send_time": 0.0,
        "end_time": 1.0,
        "chunk_times": [0.1, 0.5],
        "chunk_tokens": [1, 4],
        "prompt_tokens": 10,
        "output_tokens": 5,
        "error": None,
        **spec,
    }


def test_per_position_comes_from_the_histogram():
    counts = request_counts([row("a", [1, 0, 2, 1]), row("a", [0, 1, 0, 0])])
    # steps accepting >= i tokens: position 1: 2 + 1 + 1, position 2: 2 + 1, position 3: 1
    assert counts == {"drafts": 5.0, "draft_tokens": 15.0, "accepted_tokens": 8.0, "per_position": [4.0, 3.0, 1.0]}
    acc = acceptance(counts)
    assert acc["mean_acceptance_length"] == pytest.approx(1 + 8 / 5) and acc["acceptance_rate"] == pytest.approx(8 / 15)
    assert acc["per_position_acceptance"] == pytest.approx([0.8, 0.6, 0.2])
    assert request_counts([row("a", [1, 0]), row("a", None)]) is None  # one request without them: unknown


def test_sources_in_order_per_request_then_the_points_window_for_one_category():
    """Per-request numbers where the server gives them; else the point's /metrics window when the point has one
    category; a mixed window cannot be split by category (unknown, not a guess)."""
    rows = [row("a", [0, 0, 3]), row("a", [0, 0, 1], phase="warmup"), row("b", None)]
    window = {"drafts": 10.0, "draft_tokens": 20.0, "accepted_tokens": 10.0, "per_position": [6.0, 4.0]}
    cats = {c["category"]: c for c in category_metrics(rows, window)}
    assert cats["a"]["acceptance_source"] == "per-request" and cats["a"]["num_drafts"] == 3.0  # warmup left out
    assert cats["b"]["acceptance_source"] is None and cats["b"]["mean_acceptance_length"] is None
    (only,) = category_metrics([row("x", None)], window)
    assert only["acceptance_source"] == "window" and only["mean_acceptance_length"] == 2.0
    assert only["per_position_acceptance"] == [0.6, 0.4]


def test_lengths_and_counts_per_category():
    rows = [row("a", None, conv="1"), row("a", None, conv="1"), row("a", None, status="error", conv="2")]
    (a,) = category_metrics(rows)
    assert (a["requests"], a["completed"], a["conversations"]) == (3, 2, 2)
    assert a["output_tokens"] == 10 and a["output_tokens_mean"] == 5.0 and a["prompt_tokens_mean"] == 10.0
    assert a["tpot_p50_ms"] == pytest.approx(100.0)  # (0.5 - 0.1) s over the 4 tokens after the first


def test_counts_add_over_trials_and_unknown_stays_unknown():
    before = {"drafts": 1.0, "draft_tokens": 3.0, "accepted_tokens": 2.0, "per_position": [1.0, 1.0]}
    after = {"drafts": 5.0, "draft_tokens": 15.0, "accepted_tokens": 6.0, "per_position": [4.0, 2.0, 0.0]}
    d = counter_delta(before, after)
    assert d == {"drafts": 4.0, "draft_tokens": 12.0, "accepted_tokens": 4.0, "per_position": [3.0, 1.0, 0.0]}
    assert acceptance(d) == spec_delta(before, after)
    assert spec_delta({}, after)["mean_acceptance_length"] is None
