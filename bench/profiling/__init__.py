"""Profiling helpers: read Nsight Systems SQLite exports and attribute GPU time to NVTX ranges.

`nsys_sqlite` opens and validates an export, `nsys_analysis` turns it into tidy tables, `plot` draws them.
"""
