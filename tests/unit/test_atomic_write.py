"""The suite's one file writer (bench.core.files.atomic_write_bytes) and the two places that wrap it: vLLM source files
keep their permissions, tiny-model files are not rewritten when their bytes are the same."""

from __future__ import annotations

import os
import stat

import pytest

from bench.core.files import atomic_write_bytes, atomic_write_json
from bench.models import models
from bench.patching import manager


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_writes_synced_readable_file_and_creates_the_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = tmp_path / "new" / "a.json"
    atomic_write_json(path, {"b": 1, "a": [2]})
    assert path.read_text() == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert len(synced) == 1
    assert leftovers(path.parent) == []


def test_mode_is_the_callers(tmp_path):
    path = tmp_path / "run.sh"
    atomic_write_bytes(path, b"#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_failure_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    path = tmp_path / "points.json"
    path.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_patched_vllm_file_keeps_its_permissions(tmp_path):
    source = tmp_path / "config.py"
    source.write_text("x = 1\n")
    source.chmod(0o600)
    manager._atomic_write(source, "x = 2  # é\n")
    assert source.read_text(encoding="utf-8") == "x = 2  # é\n"
    assert stat.S_IMODE(source.stat().st_mode) == 0o600


def test_model_files_with_the_same_bytes_are_not_rewritten(tmp_path, monkeypatch):
    writes = []
    monkeypatch.setattr(models, "atomic_write_bytes", lambda path, data, mode: writes.append((path, data, mode)))
    path = tmp_path / "config.json"
    path.write_bytes(b"same")
    models._atomic_write_bytes(path, b"same")
    assert writes == []
    models._atomic_write_bytes(path, b"other")
    assert writes == [(path, b"other", 0o644)]
