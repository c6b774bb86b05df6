"""The commands that run vLLM, one library function each: sweep, profile (one point captured), load --url, ab and its calibration. Above distributed, which they schedule."""
