"""The base of every model of what a user writes (profiles, run options, workloads and their datasets): an unknown
key is an error, not silently ignored (a typo in a TOML key must not run a different benchmark), and a parsed value
is frozen. Records that the bench writes and reads back are bench.results.records' models instead."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
