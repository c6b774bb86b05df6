"""Tables for README.md from results/ alone. Per point: the report's own numbers (bench.report.analysis.collect:
speedup over the k = 0 baseline, acceptance, the roofline's bytes per step against the measured step), joined in
one table, nothing recomputed here; per server: start-up and memory figures from its vLLM log, which the report
does not show. Run from the repository root:

    .venv/bin/python reports/examples/kimi-rank-h200/summarize.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from bench.fmt import fmt
from bench.report.analysis import ReportData, collect

HERE = Path(__file__).resolve().parent
ORDER = {"no-spec": 0, "FLASHMLA/fp8": 1, "FLASHMLA/auto": 2, "TRITON_MLA/fp8": 3, "TRITON_MLA/auto": 4}
COLUMNS = {  # column -> (header, format)
    "engine": ("engine", None),
    "shape": ("shape (conc x in x out)", None),
    "state": ("status", None),
    "output_throughput": ("out tok/s", ".0f"),
    "tpot_mean_ms": ("TPOT ms (mean)", ".2f"),
    "speedup_output": ("speedup tok/s", ".2f"),
    "speedup_tpot": ("speedup TPOT", ".2f"),
    "acceptance_rate": ("acceptance", ".3f"),
    "mean_acceptance_length": ("mean acc. len", ".2f"),
    "model_gb": ("model GB/step", ".1f"),
    "step_ms": ("measured step ms", ".2f"),
    "achieved_tb_s": ("achieved TB/s", ".2f"),
    "achieved_fraction": ("of 4.8 TB/s", ".0%"),
}


def point_rows(data: ReportData) -> pd.DataFrame:
    """One row per point: the results table's columns and the roofline check's, as the report computed them."""
    roof = data.roofline.set_index("point_id")
    pts = data.points.join(roof[["tpot_mean_ms", "step_ms", "achieved_fraction", "note"]], on="point_id")
    pts["model_gb"] = pts.point_id.map(roof.bytes_per_step_uniform) / 1e9
    pts["achieved_tb_s"] = pts.point_id.map(roof.achieved_bytes_s) / 1e12
    pts["engine"] = pts.series.str.replace(" k3", "").str.replace(" k0", "")
    pts["shape"] = [f"{r.concurrency}x{r.input_len}x{r.output_len}" for r in pts.itertuples()]
    pts["state"] = [s if s == "ok" else f"{s}: {r}" for s, r in zip(pts.status, pts.reason)]
    pts["_order"] = pts.engine.map(lambda e: ORDER.get(e, 9))
    return pts.sort_values(["_order", "input_len", "concurrency"], kind="stable").reset_index(drop=True)


def startup_rows(data: ReportData) -> list[list[str]]:
    """Per server (engine): ready_s of each start, and vLLM's own load / compile / graph figures from its log."""
    results, out = data.sweep_dir, []
    for engine, grp in data.points.groupby("engine_id", sort=False):
        starts = {
            f"{float(p.get('server', {}).get('ready_s')):.0f}"
            for p in (_record(results, pid) for pid in grp.point_id)
            if (p.get("server") or {}).get("ready_s") is not None
        }
        log = results / "logs" / f"server-{engine}.log"
        if not starts or not log.is_file():
            continue
        text = log.read_text(errors="replace")
        out.append(
            [
                grp.series.iloc[0],
                "/".join(sorted(starts, key=float)),
                _grab(text, r"Model loading took ([\d.]+) GiB"),
                _grab(text, r"init engine .* took ([\d.]+) s"),
                _grab(text, r"\(compilation: ([\d.]+) s\)"),
                _grab(text, r"Graph capturing finished in (\d+) secs"),
                _grab(text, r"Available KV cache memory: ([\d.]+) GiB"),
                _grab(text, r"GPU KV cache size: ([\d,]+) tokens"),
            ]
        )
    return out


def _record(results: Path, point_id: str) -> dict:
    return json.loads((results / "points" / f"{point_id}.json").read_text())


def _grab(text: str, pattern: str) -> str:
    found = re.findall(pattern, text)
    return "/".join(dict.fromkeys(found)) if found else "-"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def main() -> None:
    data = collect(HERE / "results")
    pts = point_rows(data)
    rows = [[fmt(r[c], spec, missing="") for c, (_, spec) in COLUMNS.items()] for _, r in pts.iterrows()]
    print(table([h for h, _ in COLUMNS.values()], rows))
    print()
    for r in pts[pts.note.notna()].itertuples():
        print(f"- {r.engine} {r.shape}: {r.note}")
    print()
    header = ["engine", "ready_s (each start)", "model GiB", "init engine s", "compile s", "graphs s"]
    print(table(header + ["KV GiB", "KV tokens"], startup_rows(data)))


if __name__ == "__main__":
    main()
