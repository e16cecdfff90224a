# What the peer scripts (llamacpp.sh, vllm.sh) share: sourced, never run. Their usage errors, the
# caller's relative paths, --help from the script's own header, and the checks of the options
# both take (--prompts-file, --max-tokens).
usage() { echo "Error: $1 (see --help)" >&2; exit 2; }
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }  # paths given are the caller's
help() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0; }
check_common() {
  [[ $MAX_TOKENS =~ ^[1-9][0-9]*$ ]] || usage "--max-tokens: expected a positive whole number, got '$MAX_TOKENS'"
  if [ -n "$PROMPTS_FILE" ] && ! [ -f "$PROMPTS_FILE" ]; then usage "no such prompts file: $PROMPTS_FILE"; fi
}
