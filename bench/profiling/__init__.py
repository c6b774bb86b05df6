"""Profiling: the vLLM plugin that emits NVTX ranges / in-process timers, and the analysis of what they recorded.

Inside vLLM's processes (import nothing else from the suite): `plugin` (entry point) with `targets` (what to
wrap per vLLM line), `wrapping`, `import_hook`, `nvtx_check`, `timing` (the timer files' writer and reader) and
`effective_record` (what each worker's target and draft really run with, written once after warm-up).
In the suite: `session` attaches a capture (nsys, or timing) to sweep points; `nsys_sqlite` opens and validates
an Nsight Systems export, `nsys_readers` reads its tables, `nsys_attribution` attributes GPU work to ranges,
`nsys_analysis` turns that into tidy tables, `plot` draws them.
"""
