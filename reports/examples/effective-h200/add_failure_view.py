"""The unpatched V2 fp8 run failed before the sweep stored what a failed server had selected (the sweep does since
the commit that added bench.executor._seen). This adds that view to its failed point with the same
functions, from the committed server log alone, and marks it as added afterwards. Idempotent.
Run: .venv/bin/python reports/examples/effective-h200/add_failure_view.py"""

import json
from pathlib import Path

from bench.effective import mismatches, read_effective
from bench.store import atomic_write_json

HERE = Path(__file__).resolve().parent
for path in sorted((HERE / "unpatched-upstream-v2" / "points").glob("*.json")):
    point = json.loads(path.read_text())
    if point["status"] != "failed" or "effective" in point:
        continue
    log = (HERE / "unpatched-upstream-v2" / "logs" / f"server-{point['engine_id']}.log").read_text()
    effective = read_effective(log, [], [])
    point["effective"] = {**effective, "added_afterwards": "add_failure_view.py, from the committed server log"}
    point["mismatch"] = mismatches(point["config"]["engine"], effective)
    atomic_write_json(path, point)
    print(path.name, point["mismatch"])
