"""A copy of a committed results directory with the model configs stored the way a sweep now stores them
(models/<engine id>/{target,draft}.json, bench.measure.effective.store_model_configs).

The committed examples were swept before the configs were stored, so their reports say the shapes are unknown
(tests/unit/test_report_html.py checks that). To keep testing the roofline on their real measurements, the tests
give a copy the generated tiny GPU configs: the flavor those sweeps ran, whose byte count
test_roofline_bytes_by_hand_for_the_tiny_gpu_model pins by hand.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench.measure.effective import MODELS_DIR
from bench.models.models import FLAVORS, draft_config, target_config
from bench.results.store import SweepStore


def write_tiny_gpu_configs(root: Path, engine_ids) -> None:
    target, draft = target_config(FLAVORS["gpu"]), draft_config(FLAVORS["gpu"])
    for engine_id in engine_ids:
        folder = Path(root) / MODELS_DIR / engine_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "target.json").write_text(json.dumps(target))
        (folder / "draft.json").write_text(json.dumps(draft))


def with_stored_models(example: Path, dest: Path) -> Path:
    """`example` copied to `dest` (without its report) plus the tiny GPU configs for every engine config."""
    shutil.copytree(example, dest, ignore=shutil.ignore_patterns("report"))
    write_tiny_gpu_configs(dest, {p.engine_id for p in SweepStore(dest).records().values()})
    return dest
