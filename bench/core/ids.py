"""The suite's short content ids: engine ids, point ids (bench.config.plan) and a baseline's engine base (bench.results.records)."""

from __future__ import annotations

import hashlib
import json


def stable_id(data: dict) -> str:
    """12 hex digits of the SHA-256 of `data` as sorted, compact JSON: equal data, equal id, whatever the key order."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:12]
