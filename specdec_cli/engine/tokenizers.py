"""Tokenizers with the few calls specdec needs (encode, decode, piece, vocab, chat template), one
per kind of model models.py loads, and the check that a draft's tokenizer agrees with the
target's."""

from __future__ import annotations

from specdec_cli.errors import SpecdecError
from specdec_cli.engine.toy_model import ToyTokenizer


class HFTokenizer:
    """A transformers tokenizer with the few calls specdec needs."""

    def __init__(self, tok):
        self.tok = tok
        self.eos_token_id = tok.eos_token_id

    def has_chat_template(self) -> bool:
        return bool(getattr(self.tok, "chat_template", None))

    def encode(self, text: str, chat: bool = False) -> list[int]:
        if chat:
            out = self.tok.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)
        return list(self.tok(text)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def piece(self, token_id: int) -> str:
        return self.tok.decode([token_id])

    def vocab(self) -> list[str]:
        return self.tok.convert_ids_to_tokens(list(range(len(self.tok))))


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255: the tokenizer for `random:` models, which ship none."""

    eos_token_id = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def has_chat_template(self) -> bool:
        return False

    def encode(self, text: str, chat: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def piece(self, token_id: int) -> str:
        return self.decode([token_id])

    def vocab(self) -> list[str]:
        return [f"<{i}>" for i in range(self.vocab_size)]


class ToyTokenizerAdapter(ToyTokenizer):
    """The toy model's words (toy.py) with the same calls: no chat template, a piece is ' ' + its word."""

    def has_chat_template(self) -> bool:
        return False

    def encode(self, text: str, chat: bool = False) -> list[int]:
        return super().encode(text)

    def piece(self, token_id: int) -> str:
        return " " + self.words[token_id]


def check_vocab(target_tok, draft_tok, target_name: str, draft_name: str) -> int:
    """Draft and target must agree on every token id they share; returns the shared size.

    Judged on the tokenizers, not config.vocab_size (which may be padded: Qwen2.5-7B 152064
    vs Qwen2.5-0.5B 151936 with one tokenizer).
    """
    a, b = target_tok.vocab(), draft_tok.vocab()
    shared = min(len(a), len(b))
    for i in range(shared):
        if a[i] != b[i]:
            raise SpecdecError(
                f"draft '{draft_name}' and target '{target_name}' have incompatible tokenizers: "
                f"token {i} is {a[i]!r} in the target but {b[i]!r} in the draft"
            )
    return shared
