"""Cards: the card schema, validated once on load (card.py), the built-in prompt suite
(prompts.py), fetching a card's models (fetch.py) and exporting it to a serving engine (export.py)."""
