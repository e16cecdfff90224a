"""Training a features draft for a target: distill, its data (the target's own answers) and
its prompts."""
