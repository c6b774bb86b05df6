"""Real workloads' building blocks: text datasets (built-in sets from installed packages, the user's files, cached
Hugging Face datasets) loaded into typed conversations with provenance, and arrival processes (fixed concurrency,
or a rate with gamma burstiness, ramp-up and a concurrency cap, as vLLM's `bench serve`). docs/workloads.md.

The entry points:
    parse_source(table, where) -> DatasetSource      a profile's dataset table, validated
    load_dataset(source, base_dir=...) -> Dataset     conversations + provenance (+ the cached normalised copy)
    Dataset.pick(n, seed) -> [Conversation]            n conversations for a run, categories taking turns
    Conversation.messages(answers) -> chat messages    turn k's request, after the model's own k answers
    Arrival(...), schedule(arrival, n, seed)           when each request is due
    pace(schedule, send)                               send them so, under the concurrency cap
"""

from bench.workloads.arrival import Arrival, Paced, RampUp, Schedule, pace, request_rates, schedule
from bench.workloads.conversation import DEFAULT_CATEGORY, Conversation, Dataset, Message, Provenance
from bench.workloads.datasets import cache_root, load_dataset, read_cached
from bench.workloads.spec import SOURCE_KINDS, SPEED_BENCH_SUBSETS, DatasetSource, parse_source

__all__ = [
    "DEFAULT_CATEGORY",
    "SOURCE_KINDS",
    "SPEED_BENCH_SUBSETS",
    "Arrival",
    "Conversation",
    "Dataset",
    "DatasetSource",
    "Message",
    "Paced",
    "Provenance",
    "RampUp",
    "Schedule",
    "cache_root",
    "load_dataset",
    "pace",
    "parse_source",
    "read_cached",
    "request_rates",
    "schedule",
]
