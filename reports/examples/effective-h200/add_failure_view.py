"""The unpatched V2 fp8 run failed before the sweep stored what a failed server had selected (the sweep does since
the commit that added bench.executor._seen). This adds that view to its failed point with the same
functions, from the committed server log alone, and marks it as added afterwards. Idempotent.
Run: .venv/bin/python reports/examples/effective-h200/add_failure_view.py"""

from pathlib import Path

from bench.effective import mismatches, read_effective
from bench.store import SweepStore

store = SweepStore(Path(__file__).resolve().parent / "unpatched-upstream-v2")
for point in store.points().values():
    if point["status"] != "failed" or "effective" in point:
        continue
    effective = read_effective(store.log_path(point["engine_id"]).read_text(), [], [])
    point["effective"] = {**effective, "added_afterwards": "add_failure_view.py, from the committed server log"}
    point["mismatch"] = mismatches(point["config"]["engine"], effective)
    store.save_point(point)
    print(point["point_id"], point["mismatch"])
