"""Tables for README.md from results/ alone: per point output tok/s, TPOT, speedup over the k = 0 baseline of the
same shape, acceptance, server start-up, and achieved HBM bandwidth against the roofline model of
bench.kimi_rank.decode_step_bytes. Run from the repository root:

    .venv/bin/python reports/examples/kimi-rank-h200/summarize.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench import kimi_rank as K

HERE = Path(__file__).resolve().parent
H200_BW = 4.8e12  # bytes/s, H200 SXM datasheet (bench/report/roofline.py GPU_BANDWIDTH)


def load_points() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((HERE / "results" / "points").glob("*.json"))]


def step_time_s(rec: dict) -> float | None:
    """One decode step of one sequence: TPOT x tokens a step yields (mean acceptance length; 1 without a draft)."""
    tpot = (rec["metrics"].get("tpot_ms") or {}).get("mean")
    k = rec["config"]["engine"]["num_speculative_tokens"]
    mal = 1.0 if k == 0 else rec["spec_decode"].get("mean_acceptance_length")
    return None if tpot is None or mal is None else tpot / 1e3 * mal


def row(rec: dict, baseline: dict[str, tuple[float, float]], spec: K.RankSpec) -> list[str]:
    eng, shape = rec["config"]["engine"], rec["config"]["shape"]
    label = [rec["label"]["engine"], rec["label"]["shape"]]
    if rec["status"] != "ok":
        return [*label, f"{rec['status']}: {rec['reason']}"] + [""] * 9
    m, sd = rec["metrics"], rec["spec_decode"]
    tps = m["output_throughput"]
    base_tps, base_tpot = baseline.get(rec["label"]["shape"], (None, None))
    step = step_time_s(rec)
    model = K.decode_step_bytes(
        spec,
        concurrency=shape["concurrency"],
        context=shape["input_len"] + shape["output_len"] / 2,
        k=eng["num_speculative_tokens"],
        target_kv=str(eng["server"].get("kv_cache_dtype", "auto")),
        draft_kv=eng["draft_kv_cache_dtype"],
    )
    bw = model["total"] / step if step else None
    return [
        *label,
        "ok",
        f"{tps:.0f}",
        f"{m['tpot_ms']['mean']:.2f}",
        f"{tps / base_tps:.2f}x" if base_tps else "-",
        f"{base_tpot / m['tpot_ms']['mean']:.2f}x" if base_tpot else "-",
        "-" if sd.get("acceptance_rate") is None else f"{sd['acceptance_rate']:.3f}",
        "-" if sd.get("mean_acceptance_length") is None else f"{sd['mean_acceptance_length']:.2f}",
        f"{model['total'] / 1e9:.1f}",
        "-" if bw is None else f"{bw / 1e12:.2f}",
        "-" if bw is None else f"{bw / H200_BW:.0%}",
    ]


def startup_rows(points: list[dict]) -> list[list[str]]:
    """Per server (engine): ready_s of each start, and vLLM's own load / compile / graph figures from its log."""
    out, seen = [], set()
    for rec in points:
        eid, server = rec["engine_id"], rec.get("server") or {}
        if eid in seen or "ready_s" not in server:
            continue
        seen.add(eid)
        log = (HERE / "results" / server["log"]).read_text(errors="replace")
        starts = [
            f"{json.loads(json.dumps(r['server']['ready_s'])):.0f}"
            for r in points
            if r["engine_id"] == eid and "ready_s" in (r.get("server") or {})
        ]
        out.append(
            [
                rec["label"]["engine"],
                "/".join(sorted(set(starts), key=float)),
                _grab(log, r"Model loading took ([\d.]+) GiB"),
                _grab(log, r"init engine .* took ([\d.]+) s"),
                _grab(log, r"\(compilation: ([\d.]+) s\)"),
                _grab(log, r"Graph capturing finished in (\d+) secs"),
                _grab(log, r"Available KV cache memory: ([\d.]+) GiB"),
                _grab(log, r"GPU KV cache size: ([\d,]+) tokens"),
            ]
        )
    return out


def _grab(text: str, pattern: str) -> str:
    found = re.findall(pattern, text)
    return "/".join(dict.fromkeys(found)) if found else "-"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    points = load_points()
    manifest = json.loads((HERE / "results" / "manifest.json").read_text())
    spec = K.parse_spec(manifest["profile"]["model"]["target"])
    baseline = {
        r["label"]["shape"]: (r["metrics"]["output_throughput"], r["metrics"]["tpot_ms"]["mean"])
        for r in points
        if r["status"] == "ok" and r["config"]["engine"]["num_speculative_tokens"] == 0
    }
    order = {"no-spec": 0, "FLASHMLA/fp8": 1, "FLASHMLA/auto": 2, "TRITON_MLA/fp8": 3, "TRITON_MLA/auto": 4}
    points.sort(
        key=lambda r: (
            order.get(r["label"]["engine"].split()[0], 9),
            r["config"]["shape"]["input_len"],
            r["config"]["shape"]["concurrency"],
        )
    )
    print(f"Model: {spec.name} (all figures: {spec.layers} layers)\n")
    header = ["engine", "shape (conc x in x out)", "status", "out tok/s", "TPOT ms", "speedup tok/s", "speedup TPOT"]
    header += ["acceptance", "mean acc. len", "model GB/step", "achieved TB/s", "of 4.8 TB/s"]
    print(table(header, [row(r, baseline, spec) for r in points]))
    print()
    header = ["engine", "ready_s (each start)", "model GiB", "init engine s", "compile s", "graphs s"]
    print(table(header + ["KV GiB", "KV tokens"], startup_rows(points)))


if __name__ == "__main__":
    main()
