"""What the machine is: platform (cpu/gpu), GPU count, name, arch and driver, CPU model. No torch import."""

from __future__ import annotations

import os
import platform as _platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Protocol

from bench.core.errors import BenchError


class Hardware(Protocol):
    """What planning for another machine reads of a profile's [hardware] table (bench.config.profile.Hardware)."""

    @property
    def platform(self) -> str: ...

    @property
    def gpus(self) -> int: ...

    @property
    def arch(self) -> str | None: ...


@dataclass(frozen=True)
class Machine:
    platform: str  # "cpu" or "gpu"
    gpus: int = 0
    arch: str | None = None  # "sm90" for an H200
    gpu_name: str | None = None
    gpu_memory_gib: float | None = None
    driver: str | None = None
    cpu: str = ""
    cpu_count: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def detect_machine() -> Machine:
    cpu = _cpu_model()
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,compute_cap,driver_version,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            rows = [r.split(", ") for r in out.stdout.strip().splitlines() if r.strip()]
        except (OSError, subprocess.SubprocessError):
            rows = []
        if rows:
            name, cap, driver, mem = rows[0][:4]
            return Machine(
                "gpu",
                len(rows),
                "sm" + cap.replace(".", ""),
                name,
                round(float(mem) / 1024, 1),
                driver,
                cpu,
                os.cpu_count() or 0,
            )
    return Machine("cpu", cpu=cpu, cpu_count=os.cpu_count() or 0)


def planned_machine(detected: Machine, hardware: Hardware | None, platform: str | None, dry_run: bool) -> Machine:
    """The machine a sweep plans for: this one when it runs; with --dry-run, the profile's [hardware] or
    --platform may stand in for another."""
    if platform and platform != detected.platform and not dry_run:
        raise BenchError(
            f"--platform {platform}: this machine is {detected.platform}; only --dry-run can plan for another platform"
        )
    if not dry_run:
        return detected
    if hardware and platform in (None, hardware.platform):
        return Machine(hardware.platform, hardware.gpus, hardware.arch, cpu="(planned)")
    if platform and platform != detected.platform:
        return Machine(platform, 1 if platform == "gpu" else 0, None, cpu="(planned)")
    return detected


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return _platform.processor()
