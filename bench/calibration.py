"""Noise measured, not assumed (issue 20): `bench ab PROFILE --calibrate` runs an A/A of the profile on this
machine and keeps the between-server-start CV of the gated metrics here, per profile and machine; a later
`bench ab` of that profile on that machine plans with it, or says plainly that it has none.

Stored in the cache folder (bench.bandwidth.default_cache_dir: $BENCH_CACHE_DIR, else ~/.cache/bench) as
calibration.json: {"<profile> (<content id>, repeat <n>) @ <machine>": entry}. An entry holds, per gated metric, the median and the largest
between-start CV over the profile's points (both sides of the A/A pooled per point: they ran the same thing), the
starts and points it rests on, when and with which bench it was measured. Planning uses the largest CV of output
throughput: the noisiest point sets the design.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.bandwidth import default_cache_dir
from bench.environment import suite_git
from bench.files import atomic_write_json
from bench.hardware import Machine
from bench.ids import stable_id
from bench.profile import Profile
from bench.progress import now

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


def measure(sides: dict[str, list[dict[str, list[float]]]], gated: tuple[str, ...]) -> dict:
    """From an A/A's server starts ({point id: starts of both sides, each metric -> trial values}): per gated metric,
    the median and largest between-start CV over points, and what it rests on."""
    out: dict = {"metrics": {}, "points": len(sides)}
    starts = []
    for metric in gated:
        cvs = []
        for servers in sides.values():
            means = [float(np.mean(s[metric])) for s in servers if s.get(metric)]
            starts.append(len(means))
            if len(means) >= 2 and np.mean(means):
                cvs.append(float(np.std(means, ddof=1) / abs(np.mean(means))))
        if cvs:
            out["metrics"][metric] = {"median_cv": float(np.median(cvs)), "max_cv": float(max(cvs)), "points": len(cvs)}
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


def planning_noise(profile: str, machine: Machine, default: float, cache_dir: Path | None = None) -> tuple[float, str]:
    """The between-start CV an A/B of `profile` plans with on `machine`, and a sentence saying where it comes from."""
    entry = load(profile, machine, cache_dir)
    found = ((entry or {}).get("metrics") or {}).get(PLAN_METRIC)
    if entry is not None and found:
        return float(found["max_cv"]), (
            f"noise from this machine's calibration ({entry['measured']}, {entry['starts_per_point']} starts a point, "
            f"{found['points']} points): {found['max_cv']:.1%} between starts at the noisiest point"
        )
    return default, (
        f"no calibration of {profile} on this machine ({machine_label(machine)}): planning with {default:.1%}, an "
        "earlier CPU A/A's; `bench ab PROFILE --calibrate --baseline ENV` measures it here"
    )


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}
