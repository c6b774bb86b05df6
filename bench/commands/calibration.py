"""Noise measured, not assumed (issue 20): `bench ab PROFILE --calibrate` runs an A/A of the profile on this
machine and keeps the between-server-start CV of the gated metrics here, per profile and machine; a later
`bench ab` of that profile on that machine plans with it, or says plainly that it has none.

Stored in the cache folder (bench.core.files.default_cache_dir: $BENCH_CACHE_DIR, else ~/.cache/bench) as
calibration.json: {"<profile> (<content id>, repeat <n>) @ <machine>": entry}. An entry holds, per gated metric:
- the median and the largest between-start CV over the profile's points (both sides of the A/A pooled per point:
  they ran the same thing);
- the sd of the rounds' log ratios (candidate / baseline of one round: what the paired gate's bound rests on) at
  the noisiest point, and its one-sided 80% upper confidence bound (chi-square on rounds - 1 degrees of freedom:
  a point estimate from ~5 rounds is as likely too small as too large, and a plan on it would fall short half the
  time);
- the same for one start's log value (the unpaired gate);
with the starts and points it rests on, when and with which bench it was measured. Planning (`planning_noise`)
takes the largest upper bound over the gated metrics: the noisiest point sets the design.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.config.profile import Profile
from bench.core.clock import now
from bench.core.files import atomic_write_json, default_cache_dir
from bench.core.hardware import Machine
from bench.core.ids import stable_id
from bench.results.environment import suite_git
from bench.verdicts.stats import compare_servers, paired_sd_from_cv, sd_upper_bound

FILE = "calibration.json"
PLAN_METRIC = "output_throughput"


def machine_label(machine: Machine) -> str:
    """What a calibration is valid for: the GPU (name, driver) or the CPU model and core count."""
    if machine.platform == "gpu":
        return f"{machine.gpus} x {machine.gpu_name or 'GPU'} (driver {machine.driver or '?'})"
    return f"{machine.cpu or 'CPU'} ({machine.cpu_count} cores)"


def profile_key(profile: Profile, repeat: int) -> str:
    """What a calibration measured besides the machine: the profile by name and content (an edited copy under the
    same name is another profile) and the trials per server start (`--repeat`: a start's mean over more trials
    varies less)."""
    return f"{profile.name} ({stable_id(profile.model_dump(mode='json', exclude={'source'}))}, repeat {repeat})"


def key(profile: str, machine: Machine) -> str:
    return f"{profile} @ {machine_label(machine)}"


def measure(
    sides: dict[str, list[dict[str, list[float]]]],
    gated: tuple[str, ...],
    rounds: dict[str, tuple[list[dict[str, list[float]]], list[dict[str, list[float]]]]] | None = None,
) -> dict:
    """From an A/A's server starts ({point id: starts of both sides, each metric -> trial values}) and, where known,
    its rounds ({point id: (baseline starts, candidate starts) paired by round}): per gated metric, the median and
    largest between-start CV over points, the largest sd of a round's log ratio (the paired gate's own, from
    `compare_servers`: at least MIN_STARTS rounds) and of one start's log value with their 80% upper bounds
    (`sd_upper_bound`), and what it rests on."""
    out: dict = {"metrics": {}, "points": len(sides)}
    starts = []
    for metric in gated:
        cvs, logs, ratios = [], [], []
        for pid, servers in sides.items():
            means = [float(np.mean(s[metric])) for s in servers if s.get(metric)]
            starts.append(len(means))
            if len(means) >= 2 and np.mean(means):
                cvs.append(float(np.std(means, ddof=1) / abs(np.mean(means))))
            if len(means) >= 2 and min(means) > 0:
                logs.append((float(np.std(np.log(means), ddof=1)), len(means) - 1))
            b, c = (rounds or {}).get(pid, ([], []))
            if b and c:  # what the paired gate's bound rests on, computed by the gate itself
                paired = compare_servers(
                    [x.get(metric) or [] for x in b],
                    [y.get(metric) or [] for y in c],
                    higher_better=True,
                    min_effect=0.0,
                    alpha=0.05,
                    paired=True,
                )
                if paired.sd_log is not None and paired.df:
                    ratios.append((paired.sd_log, int(paired.df)))
        if not cvs:
            continue
        found = {"median_cv": float(np.median(cvs)), "max_cv": float(max(cvs)), "points": len(cvs)}
        for name, spread in (("sd_log", logs), ("sd_log_ratio", ratios)):
            if spread:
                uppers = [sd_upper_bound(sd, df) for sd, df in spread]
                worst = int(np.argmax(uppers))
                found |= {name: spread[worst][0], f"{name}_upper": uppers[worst], f"{name}_df": spread[worst][1]}
        out["metrics"][metric] = found
    out["starts_per_point"] = int(min(starts)) if starts else 0
    return out


def save(profile: str, machine: Machine, entry: dict, cache_dir: Path | None = None) -> Path:
    path = Path(cache_dir or default_cache_dir()) / FILE
    data = _read(path)
    data[key(profile, machine)] = {**entry, "measured": now(), "suite_git": suite_git()}
    atomic_write_json(path, data)
    return path


def load(profile: str, machine: Machine, cache_dir: Path | None = None) -> dict | None:
    entry = _read(Path(cache_dir or default_cache_dir()) / FILE).get(key(profile, machine))
    return entry if isinstance(entry, dict) else None


def planning_noise(
    profile: str, machine: Machine, default: float, cache_dir: Path | None = None, paired: bool = True
) -> tuple[float, str]:
    """The sd an A/B of `profile` plans its rounds with on `machine` (paired: of a round's log ratio; unpaired: of
    one start's log value), and a sentence saying where it comes from: the largest 80% upper bound over the gated
    metrics of this machine's calibration; an older calibration without one, its largest CV (paired: x sqrt(2));
    none, `default` (a CV; paired: x sqrt(2))."""
    entry = load(profile, machine, cache_dir)
    metrics = (entry or {}).get("metrics") or {}
    name = "sd_log_ratio" if paired else "sd_log"
    bounds = {m: f for m, f in metrics.items() if f.get(f"{name}_upper") is not None}
    what = "a round's log ratio" if paired else "one start's log value"
    if entry is not None and bounds:
        metric, found = max(bounds.items(), key=lambda kv: kv[1][f"{name}_upper"])
        return float(found[f"{name}_upper"]), (
            f"noise from this machine's calibration ({entry['measured']}, {entry['starts_per_point']} starts a point, "
            f"{found['points']} points): sd of {what} {found[name]:.1%} at the noisiest point ({metric}), its "
            f"80% upper bound {found[f'{name}_upper']:.1%} on {found[f'{name}_df']} df"
        )
    found = metrics.get(PLAN_METRIC)
    if entry is not None and found:
        sd = paired_sd_from_cv(found["max_cv"]) if paired else float(found["max_cv"])
        return sd, (
            f"noise from this machine's calibration ({entry['measured']}, an older one with no upper bound): "
            f"{found['max_cv']:.1%} between starts at the noisiest point, sd of {what} {sd:.1%}; "
            "`bench ab PROFILE --calibrate` again stores the bound"
        )
    sd = paired_sd_from_cv(default) if paired else default
    return sd, (
        f"no calibration of {profile} on this machine ({machine_label(machine)}): planning with a between-start CV "
        f"of {default:.1%} (sd of {what} {sd:.1%}), an earlier CPU A/A's; `bench ab PROFILE --calibrate --baseline "
        "ENV` measures it here"
    )


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
