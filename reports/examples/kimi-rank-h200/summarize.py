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
ORDER = {  # engine -> row order: the plain rank's engines, then the emulated DCP8 rank's
    **{"no-spec": 0, "FLASHMLA/fp8": 1, "FLASHMLA/auto": 2, "TRITON_MLA/fp8": 3, "TRITON_MLA/auto": 4, "auto/fp8": 5},
    **{"no-spec dcp8-emulated": 6, "FLASHMLA/fp8 dcp8-emulated": 7},
}
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
    pts["engine"] = pts.series.map(_engine)
    pts["shape"] = [_shape(data.sweep_dir, r) for r in pts.itertuples()]
    pts["state"] = [s if s == "ok" else f"{s}: {r}" for s, r in zip(pts.status, pts.reason)]
    pts["_order"] = pts.engine.map(lambda e: ORDER.get(e, 9))
    return pts.sort_values(["_order", "input_len", "concurrency"], kind="stable").reset_index(drop=True)


def _shape(results: Path, row) -> str:
    """The shape the server saw; an emulated DCP rank's also names the full shape it stands for."""
    shape = f"{row.concurrency}x{row.input_len}x{row.output_len}"
    emulation = _record(results, row.point_id)["config"].get("emulation")
    if not emulation:
        return shape
    full = emulation["full_shape"]
    return (
        f"{shape} [DCP{emulation['dcp_size']} rank of {full['concurrency']}x{full['input_len']}x{full['output_len']}]"
    )


def startup_rows(data: ReportData) -> list[list[str]]:
    """Per server (engine), in ORDER: ready_s of each start that served points (in start order), and vLLM's own
    load / compile / graph figures of every start in its log (one value when all starts agree)."""
    results, out = data.sweep_dir, []
    for engine, grp in data.points.groupby("engine_id", sort=False):
        servers = {
            p["server"]["started"]: p["server"]["ready_s"]
            for p in (_record(results, pid) for pid in grp.point_id)
            if (p.get("server") or {}).get("ready_s") is not None
        }
        log = results / "logs" / f"server-{engine}.log"
        if not servers or not log.is_file():
            continue
        text = log.read_text(errors="replace")
        patterns = [
            r"Model loading took ([\d.]+) GiB",
            r"init engine .* took ([\d.]+) s",
            r"\(compilation: ([\d.]+) s\)",
            r"Graph capturing finished in (\d+) secs",
            r"Available KV cache memory: ([\d.]+) GiB",
            r"GPU KV cache size: ([\d,]+) tokens",
        ]
        ready = "/".join(f"{servers[t]:.0f}" for t in sorted(servers))
        row = [grp.series.iloc[0], str(len(re.findall(r"init engine .* took", text))), ready]
        out.append((ORDER.get(_engine(grp.series.iloc[0]), 9), row + [_grab(text, p) for p in patterns]))
    return [row for _, row in sorted(out, key=lambda o: o[0])]


def _engine(series: str) -> str:
    return series.replace(" k3", "").replace(" k0", "")


def _record(results: Path, point_id: str) -> dict:
    return json.loads((results / "points" / f"{point_id}.json").read_text())


def _grab(text: str, pattern: str) -> str:
    found = re.findall(pattern, text)
    if not found:
        return "-"
    return found[0] if len(set(found)) == 1 else "/".join(found)


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
    header = ["engine", "starts", "ready_s (starts that served points)", "model GiB", "init engine s", "compile s"]
    print(table(header + ["graphs s", "KV GiB", "KV tokens"], startup_rows(data)))


if __name__ == "__main__":
    main()
