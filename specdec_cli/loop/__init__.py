"""The decode loop: one loop over B >= 1 rows for plain and speculative decoding, greedy and
sampled (decoding.py, sampling.py), how much to propose each round (schedule.py), what is
batch-specific (batch.py) and the counting (metrics.py)."""
