"""Patch manager: locate a vLLM install, pick the patch series for its version, and apply, verify, revert."""

from bench.patching.locate import VllmInstall, locate_vllm
from bench.patching.manager import (
    apply_series,
    check_selection,
    check_verified,
    format_status,
    left_out_fixes,
    patch_report,
    revert_series,
)

__all__ = [
    "VllmInstall",
    "apply_series",
    "check_selection",
    "check_verified",
    "format_status",
    "left_out_fixes",
    "locate_vllm",
    "patch_report",
    "revert_series",
]
