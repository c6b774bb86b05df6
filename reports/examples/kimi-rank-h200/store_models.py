"""Add models/<engine id>/{target,draft}.json to results/, the way a sweep stores them now
(bench.effective.store_model_configs), for this sweep, which ran before the sweep stored them.

Not a guess: every server of the sweep was started on `~/.cache/bench/models/<folder>/target` (its argv is in
points/*.json), and the folder's name ends in a hash of both generated configs (bench.kimi_rank.cache_folder).
This script regenerates the configs of the manifest's model (with dcp=N for an emulated DCP-N rank's engine, whose
configs the continued sweep stored itself), refuses unless today's generator gives that same folder name for every
server, and writes them (the draft's only for an engine with a draft, as a sweep does); rewriting a config the sweep
stored leaves it byte-identical.
Run from the repository root:

    .venv/bin/python reports/examples/kimi-rank-h200/store_models.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from bench import kimi_rank
from bench.effective import store_model_configs
from bench.store import SweepStore

RESULTS = Path(__file__).resolve().parent / "results"


def served_folders(results: Path) -> dict[str, tuple[str, bool, int]]:
    """{engine id: (name of the generated folder its server loaded, whether it ran a draft, emulated DCP size)}."""
    out = {}
    for point in SweepStore(results).points().values():
        argv = (point.get("server") or {}).get("argv") or []
        if "--model" in argv:
            folder = Path(argv[argv.index("--model") + 1]).parent.name
            dcp = (point["config"].get("emulation") or {}).get("dcp_size", 1)
            out[point["engine_id"]] = (folder, point["config"]["engine"]["num_speculative_tokens"] > 0, dcp)
    return out


def main() -> int:
    manifest = json.loads((RESULTS / "manifest.json").read_text())
    base = kimi_rank.parse_spec(manifest["profile"]["model"]["target"])
    with tempfile.TemporaryDirectory() as tmp:
        for engine, (folder, has_draft, dcp) in sorted(served_folders(RESULTS).items()):
            spec = dataclasses.replace(base, dcp=dcp)
            models = kimi_rank.write_rank_models(kimi_rank.cache_folder(Path(tmp), spec), spec)
            expected = models.target.parent.name
            if folder != expected:
                print(f"{engine}: served {folder}, today's generator gives {expected}: not stored", file=sys.stderr)
                return 1
            store_model_configs(RESULTS, engine, str(models.target), str(models.draft) if has_draft else None)
            print(f"{engine}: models/{engine}/ ({folder}{', draft' if has_draft else ''})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
