"""The workload part of a sweep point: what is sent (random token ids, or a text dataset's conversations through the
chat API), with which sampling, and when (the arrival process). Its `to_dict` goes into the point id.

The default workload, `random` at fixed concurrency, adds nothing to the point's dict: point ids of profiles
written before workloads existed stay what they were.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from bench.core.schema import Strict
from bench.workloads.arrival import Arrival

RANDOM = "random"  # the default workload's id, and the kind of token-id workloads
RANDOM_CATEGORY = "random"  # the one category of a random workload


class Sampling(Strict):
    """Sampling of a text workload's requests. Unset fields are not sent: the server's defaults apply (vLLM's
    `--generation-config auto`, its default, takes them from the model's generation_config.json), and an answer
    stops at EOS unless `ignore_eos`."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)  # vLLM: -1 (or 0) = off
    max_tokens: int | None = Field(default=None, ge=1)  # per answer; None: the data's output_tokens, else to EOS
    ignore_eos: bool = False

    def request_fields(self) -> dict[str, Any]:
        """The fields a request carries: the set ones only (ignore_eos only when true)."""
        out = self.model_dump(exclude_none=True, exclude={"ignore_eos", "max_tokens"})
        if self.ignore_eos:
            out["ignore_eos"] = True
        return out

    @property
    def label(self) -> str:
        """`t0`, `t0.7-p0.95`, `gen` (all from the model's generation config), `+ieos` when EOS is ignored."""
        pairs = (("t", self.temperature), ("p", self.top_p), ("k", self.top_k))
        label = "-".join(f"{key}{_num(value)}" for key, value in pairs if value is not None) or "gen"
        if self.max_tokens is not None:
            label += f"-max{self.max_tokens}"
        return label + ("-ieos" if self.ignore_eos else "")


def _num(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Workload:
    """One workload of one point. `dataset` is None for random token ids (the batch shape says the lengths);
    else the dataset's source table as the profile gives it, sent as chat conversations. `arrival` None: fixed
    concurrency at the shape's (random only). `base_dir`: where relative dataset paths start (not hashed)."""

    id: str = RANDOM
    dataset: dict | None = None
    sampling: Sampling | None = None
    chat_template_kwargs: dict | None = None
    arrival: Arrival | None = None
    base_dir: str = "."

    @property
    def is_text(self) -> bool:
        return self.dataset is not None

    @property
    def is_default(self) -> bool:
        """Today's load: random ids at the shape's fixed concurrency; it adds nothing to the point id."""
        return not self.is_text and self.arrival is None

    def to_dict(self) -> dict | None:
        """What the point id hashes (None for the default); the id names the workload in reports, not here."""
        if self.is_default:
            return None
        out: dict[str, Any] = {"arrival": self.arrival.model_dump(mode="json") if self.arrival else None}
        if self.is_text:
            out["dataset"] = self.dataset
            out["sampling"] = (self.sampling or Sampling()).model_dump(mode="json")
            out["chat_template_kwargs"] = self.chat_template_kwargs
        return out

    @property
    def dataset_key(self) -> str:
        """Names one loaded dataset (source table + the folder its paths start from)."""
        return json.dumps([self.dataset, self.base_dir], sort_keys=True)

    def label(self, shape_label: str | None) -> str:
        """The point's load label: the batch shape for the default; else the workload id, its sampling (text),
        the shape (random) and the arrival: `mt-bench t0 c8`, `random 4x64x32 r4-b1-c4`."""
        if self.is_default:
            return str(shape_label)
        parts = [self.id]
        if self.is_text:
            parts.append((self.sampling or Sampling()).label)
        else:
            parts.append(str(shape_label))
        if self.arrival is not None:
            parts.append(self.arrival.label)
        return " ".join(parts)

    def describe(self) -> dict:
        """For the point record: what this workload asked for, with vLLM bench serve's matching arguments."""
        out: dict[str, Any] = {"id": self.id, "kind": "text" if self.is_text else RANDOM}
        if self.arrival is not None:
            out["arrival"] = {
                "label": self.arrival.label,
                "vllm_bench_serve_args": self.arrival.vllm_bench_serve_args(),
            }
        if self.is_text:
            out["dataset"] = self.dataset
            out["sampling"] = (self.sampling or Sampling()).model_dump(mode="json", exclude_none=True)
            out["sampling_label"] = (self.sampling or Sampling()).label
            out["chat_template_kwargs"] = self.chat_template_kwargs
        return out
