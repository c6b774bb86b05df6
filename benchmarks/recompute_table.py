"""Recompute committed results directories with the current estimator (bench.measure.recompute, records only: no report is
built) and tabulate each steady point's headline before and after, with the stated precision and the whole cycles.

    python benchmarks/recompute_table.py ROOT... --out TABLE.md

Every results directory under each ROOT (a folder with manifest.json) is recomputed in place; the table lists the
points whose headline is steady, before -> after, sorted by the relative change."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.measure.recompute import recompute
from bench.results.records import Precision, Steady
from bench.results.store import SweepStore


def _headlines(root: Path) -> dict[str, dict]:
    out = {}
    for point_id, r in SweepStore(root).records().items():  # version-checked and validated
        m = r.metrics
        if r.status != "ok" or m is None or m.window != "steady":
            continue
        steady, precision = m.steady or Steady(), m.precision or Precision()
        out[point_id] = {
            "label": " ".join(str(v) for v in r.label.values() if v),
            "tok_s": m.output_throughput,
            "hw": precision.output_throughput_halfwidth,
            "cycles": steady.cycles,
            "short": steady.short,
            "unit": precision.unit,
        }
    return out


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = []
    dirs = sorted(
        {m.parent for root in args.roots for m in root.rglob("manifest.json") if (m.parent / "points").is_dir()}
    )
    for d in dirs:
        before = _headlines(d)
        recompute(d)
        after = _headlines(d)
        for pid, b in before.items():
            a = after.get(pid)
            if not a or not b["tok_s"] or not a["tok_s"]:
                continue
            rows.append((a["tok_s"] / b["tok_s"] - 1, d, pid, b, a))
        print(f"{d}: {len(before)} steady points")
    rows.sort(key=lambda r: r[0])
    lines = [
        "# Steady headlines recomputed over whole cycles",
        "",
        f"`python benchmarks/recompute_table.py {' '.join(str(r) for r in args.roots)} --out {args.out}`: every "
        "committed steady point's headline before (the span's own rate, +- from sub-window batch means) and after "
        "(tokens over seconds of whole cycles, +- from the ratio estimator over the same units; docs/measurement.md).",
        "",
        f"{len(rows)} steady points in {len(dirs)} results directories; {sum(1 for r in rows if r[0] < -0.01)} moved "
        f"down more than 1%, {sum(1 for r in rows if r[0] > 0.01)} up more than 1%, "
        f"short (fewer than 3 whole cycles): {sum(1 for r in rows if r[4]['short'])}.",
        "",
        "| results | point | before tok/s (+-) | after tok/s (+-) | change | whole cycles |",
        "|---|---|---|---|---|---|",
    ]
    for change, d, _pid, b, a in rows:
        cycles = f"{a['cycles']}{' (short)' if a['short'] else ''}"
        lines.append(
            f"| {d} | {a['label']} | {b['tok_s']:,.1f} ({_pct(b['hw'])}) | {a['tok_s']:,.1f} ({_pct(a['hw'])}) | "
            f"{change:+.1%} | {cycles} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"{len(rows)} points -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
