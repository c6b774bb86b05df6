"""Two results directories compared: the statistics (a server start is the sample), the per-point verdicts and the gate, and what changed between the sides. Reads records, sends no request."""
