"""The report's shared plot axes and styles (bench.report.figure_style) on points without a fixed batch shape."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.figure_style import series_styles, shape_x


def _text_points() -> pd.DataFrame:
    """Text-workload points (no input length; their load label is `shape`) beside one random-prompt point."""
    return pd.DataFrame(
        {
            "series": ["A mt-bench", "A notes t0", "A notes t1", "A random"],
            "concurrency": [4.0, 3.0, 3.0, 4.0],
            "input_len": [np.nan, np.nan, np.nan, 32.0],
            "output_len": [24.0, 16.0, 16.0, 16.0],
            "shape": ["c4", "c3", "c3", "4x32x16"],
            "workload": ["mt-bench", "notes t0", "notes t1", None],
            "draft_attention_backend": ["CPU_MLA"] * 4,
            "draft_kv_cache_dtype": ["auto"] * 4,
            "dcp_size": [1] * 4,
        }
    )


def test_text_points_are_placed_by_their_load_label_and_in_the_same_order_every_time():
    df = _text_points()
    first = shape_x(df)
    assert not any("nan" in label for label in first.labels)
    assert list(first.x) == [2.0, 0.0, 0.0, 1.0], "ordered by concurrency; both c3 points share one tick"
    assert first.labels == ["c3", "4\n32/16", "c4"]
    shuffled = df.sample(frac=1, random_state=3)
    again = shape_x(shuffled)
    assert again.labels == first.labels and again.x.sort_index().tolist() == first.x.tolist()


def test_series_that_differ_only_by_workload_differ_in_color():
    styles = series_styles(_text_points())
    assert len({s["color"] for s in styles.values()}) == 4
