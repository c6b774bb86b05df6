"""Reports built from a results directory alone (no GPU, no server)."""
