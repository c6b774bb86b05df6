"""bench: benchmark and profiling suite for vLLM EAGLE3 speculative decoding on MLA models."""

__version__ = "0.1.0"
