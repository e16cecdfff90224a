"""A cost profile that knows it was measured badly (issue 34, item 8): each width's timed tries
have a spread; a profile measured while the machine was busy is used for that run and never
cached, with one warning; a cached profile whose step a quick check now finds much slower than
the machine is was measured while busy, and is measured again; plan shows the spread."""

from __future__ import annotations

import pytest

from specdec_cli.engine import costs
from specdec_cli.engine.toy_model import ToyLM


def test_spread_is_the_interquartile_range_over_the_median():
    assert costs.spread([0.1] * 5) == 0.0
    assert costs.spread([0.10, 0.10, 0.11, 0.10, 0.10]) < 0.1  # a quiet machine repeats itself
    assert costs.spread([0.10, 0.16, 0.10, 0.21, 0.12]) > costs.BUSY_SPREAD  # another job came and went
    assert costs.spread([0.2, 0.3, 0.2]) == pytest.approx(0.5)  # three tries: the full range


class Slow(ToyLM):
    """A toy target slow enough (per step) to be worth checking at start-up."""


def measured(spreads):
    return lambda target, widths: ([64, 512], [[0.1 * (1 + n / 10) for n in range(widths)]] * 2, ([], []), [], spreads(widths))


def test_a_profile_measured_while_busy_is_used_once_and_not_cached(monkeypatch, capsys):
    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.5] * w, [0.05] * (w - 1) + [0.6]]))
    target = ToyLM(16)
    found = costs.profile(target, "toy-busy", None, {})
    assert found.busy and not list(costs.cache_dir("costs").glob("*.json"))
    err = capsys.readouterr().err
    assert err.count("Warning:") == 1 and "looked busy while measuring the cost profile" in err
    assert "each width's timings spread 50% at the median" in err and "not caching it" in err
    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.05] * w, [0.05] * (w - 1) + [0.9]]))
    quiet = costs.profile(target, "toy-busy", None, {})  # one bimodal width on a quiet machine: not busy
    assert not quiet.busy and len(list(costs.cache_dir("costs").glob("*.json"))) == 1
    assert quiet.as_dict()["spread"] == [[0.05] * 5, [0.05] * 4 + [0.9]]
    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.05] * w, [0.7] * w]))
    assert costs.profile(target, "toy-busy-long", None, {}).busy  # busy while one context was measured
    assert len(list(costs.cache_dir("costs").glob("*.json"))) == 1 and "spread 70% at the median" in capsys.readouterr().err


@pytest.mark.parametrize(("now", "remeasured", "said"), [
    (0.05, True, "it was measured while busy; measuring again"),  # the cached step was 2x too slow
    (0.25, False, "this machine is busier than when its cost profile was measured"),  # busy now: kept
    (0.11, False, None),  # within DRIFT: nothing to say
])
def test_a_cached_profile_is_checked_against_the_machine_now(monkeypatch, capsys, now, remeasured, said):
    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.05] * w] * 2))
    target = ToyLM(16)
    costs.profile(target, "toy-check", None, {})  # cached, step 0.1 s
    calls = []
    monkeypatch.setattr(costs, "measure_target", lambda t, w: calls.append(w) or measured(lambda w: [[0.05] * w] * 2)(t, w))
    monkeypatch.setattr(costs, "forward_seconds", lambda jobs, context, repeats=None, **kw: [now] * len(jobs))
    capsys.readouterr()
    again = costs.profile(target, "toy-check", None, {})
    assert bool(calls) == remeasured and again.cached == (not remeasured)
    err = capsys.readouterr().err
    assert (said in err) if said else err == ""


def test_the_start_up_check_times_a_step_in_the_forms_the_profile_chose(monkeypatch, capsys):
    """A cached profile that chose oneDNN's prepacked weights is checked against a prepacked step,
    not an F.linear one (in bfloat16 on an AMX Xeon 1.5x slower: a false 'busier' warning in
    every process)."""
    class Switch:
        mode, used = "measure", None

        def use(self, weight_major, packed):
            self.used = (list(weight_major), list(packed))

    monkeypatch.setattr(costs, "measure_target",
                        lambda t, w: ([64, 512], [[0.1] * w] * 2, ([1], list(range(1, w + 1))), [], [[0.05] * w] * 2))
    target = ToyLM(16)
    target.forms = Switch()
    costs.profile(target, "toy-forms", None, {})
    target.forms = Switch()  # a new process: F.linear until a profile is read
    seen = []
    monkeypatch.setattr(costs, "forward_seconds",
                        lambda jobs, context, repeats=None, **kw: seen.append(target.forms.used) or [0.1] * len(jobs))
    capsys.readouterr()
    assert costs.profile(target, "toy-forms", None, {}).cached
    assert seen == [([1], [1, 2, 3, 4, 5])] and capsys.readouterr().err == ""


def test_a_compiled_target_gets_no_start_up_check(monkeypatch):
    """Its one-token step would be a graph of its own, read back or compiled in every process."""
    class Compiled(ToyLM):
        compiled = True

    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.05] * w] * 2))
    costs.profile(Compiled(16), "toy-compiled", None, {})
    monkeypatch.setattr(costs, "forward_seconds", lambda *a, **k: pytest.fail("timed a compiled step"))
    assert costs.profile(Compiled(16), "toy-compiled", None, {}).cached


def test_a_fast_target_gets_no_start_up_check(monkeypatch):
    """A toy's steps are too short to time against (below CHECKED_STEP_S): no check, no noise."""
    monkeypatch.setattr(costs, "measure_target", lambda target, widths: ([64], [[0.001] * widths], ([], []), [], [[0.0] * widths]))
    costs.profile(ToyLM(16), "toy-fast", None, {})
    monkeypatch.setattr(costs, "forward_seconds", lambda *a, **k: pytest.fail("timed a toy"))
    assert costs.profile(ToyLM(16), "toy-fast", None, {}).cached


def test_plan_shows_the_spread(run, write_card, monkeypatch):
    from tests.test_kernels import tiny_card

    monkeypatch.setattr(costs, "measure_target", measured(lambda w: [[0.04] * w, [0.04] * (w - 1) + [0.07]]))
    r = run("plan", "-c", tiny_card(write_card), "--prompts-file", "-", input='{"id": "a", "prompt": "ab cd ab"}\n')
    assert r.exit_code == 0, r.stderr
    assert "timed tries spread 4% (median), 7% (widest)" in " ".join((r.stdout + r.stderr).split())
