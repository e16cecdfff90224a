"""The engine: the target and its models (loading, tokenizers, the toy), the KV cache the loop
owns, the forward policy (shapes, matmul forms, compiled graphs) and what a forward costs here."""
