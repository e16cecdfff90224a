"""specdec: speculative (draft-verify) decoding from the command line."""

__version__ = "0.1.0"
