"""`device_map: auto`: the card's target is placed by transformers/accelerate, not moved with
`.to(device)`. Without a GPU everything lands on the CPU, which is what these tests can run;
several GPUs are not tested here (README: "A target larger than one GPU")."""

from __future__ import annotations

import json

import pytest
import yaml

from .checkpoints import tiny_checkpoint


@pytest.fixture
def spy(monkeypatch):
    """Records the device_map every from_pretrained call receives."""
    from transformers import AutoModelForCausalLM

    seen = []
    real = AutoModelForCausalLM.from_pretrained.__func__

    def recording(cls, *args, **kwargs):
        seen.append(kwargs.get("device_map"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(recording))
    return seen


def test_device_map_auto_reaches_transformers_and_changes_no_output(run, tmp_path, spy):
    tiny_checkpoint(tmp_path / "a")
    outputs = {}
    for device_map in (None, "auto"):
        card = {"description": "t", "target": str(tmp_path / "a"), "draft": {"kind": "prompt-lookup"},
                "decoding": {"max_tokens": 12}, **({"device_map": device_map} if device_map else {})}
        path = tmp_path / f"{device_map}.yaml"
        path.write_text(yaml.safe_dump(card))
        r = run("generate", "-c", path, "--json", "ba be bi ba be")
        assert r.exit_code == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["identical"] is True
        outputs[device_map] = obj["spec"]["tokens"]
    assert spy == [None, "auto"]
    assert outputs["auto"] == outputs[None] and len(outputs[None]) == 12

