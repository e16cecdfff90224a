"""The pair: a card's target and draft, loaded once and resident (loading.py), and whole requests
on it, one prompt or many batched (generation.py)."""
