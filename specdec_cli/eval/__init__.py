"""Evaluation on a loaded pair: bench (timed runs, its rows), plan (predictions from the cost
profile), verify (exactness), peers (transformers' own generate) and the statistical tests."""
