"""Paper cards: an encoding declares its paper's knowledge with its registration, and the
benchmark and the board read it generically (a new encoding with a setup and a claim
needs no line anywhere else)."""

from __future__ import annotations

import pytest

import pezoo
from pezoo import PaperCard, PaperClaim, PlotLook, RunFacts
from pezoo.registry import CARDS, ENCODINGS


def test_a_wrapped_name_reads_its_wrappers_card_and_an_unknown_one_the_empty_card():
    assert pezoo.card_of("randomized:rope") is pezoo.card_of("randomized")
    assert pezoo.card_of("randomized").setup is not None
    assert pezoo.card_of("abacus+fire") == PaperCard()
    assert set(pezoo.cards()) == set(ENCODINGS)


def test_pinned_looks_are_distinct():
    looks = [c.look for c in pezoo.cards().values() if c.look is not None]
    assert len(set(looks)) == len(looks)


@pytest.fixture
def toy():
    """A toy encoding registered with a card (setup, departures, claim, look), removed after."""

    def setup(task: str, dims: pezoo.ModelDims) -> dict:
        return {"slope": 0.5 if task == "copy" else 0.25}

    def departures(run: RunFacts) -> list[str]:
        return [] if run.options.get("slope") == setup(run.task, run.dims)["slope"] else ["slope unlike the paper"]

    claim = PaperClaim(
        order=99,
        source="Toy 2026, §1",
        says="It reaches 3×.",
        test="EM ≥ {em_ok} to 3× N.",
        rule="reach",
        row="toy_card{paper}",
        against=("nope",),
        multiple=3,
    )
    card = PaperCard(
        paper="Toy 2026", setup=setup, departures=departures, claims=(claim,), look=PlotLook("#123456", "")
    )

    @pezoo.register("toy_card", card=card)
    class ToyCard(pezoo.NoPE):
        def __init__(self, slope: float = 1.0, **kw: object) -> None:
            super().__init__()
            self.slope = slope

    yield card
    ENCODINGS._factories.pop("toy_card")
    CARDS.pop("toy_card")


def test_the_harness_and_the_board_read_a_new_encodings_card(toy):
    from harness.config.protocols import departure_paper, departures, paper_pe_options
    from harness.training.backbone import BackboneConfig
    from leaderboard.claims import card_claims
    from leaderboard.styles import pinned_styles

    backbone = BackboneConfig(d_model=32, n_layers=2, n_heads=4)
    assert paper_pe_options("toy_card", "copy", backbone) == {"slope": 0.5}
    assert departures("toy_card", "copy", {"slope": 0.5}, backbone) == []
    assert departures("toy_card", "copy", {"slope": 0.1}, backbone) == ["slope unlike the paper"]
    assert departure_paper("toy_card") == "Toy 2026"
    (claim,) = [c for c in card_claims() if c.source == "Toy 2026, §1"]
    assert claim.test == "EM ≥ 0.9 to 3× N." and claim.multiple == 3
    assert card_claims()[-1].source == "Toy 2026, §1"  # shown by order, after the built-in claims
    assert pinned_styles()["toy_card"].colour == "#123456"


def test_an_unknown_claim_rule_is_a_clear_error():
    from leaderboard.claims import board_claim

    bad = PaperClaim(order=1, source="s", says="s", test="t", rule="beats_everyone", row="rope")
    with pytest.raises(ValueError, match="unknown rule 'beats_everyone'; rules: reach"):
        board_claim(bad)


def test_prism_diagnostics_skip_other_encodings():
    """PRISM's card reports cursor trajectories (end to end: tests/leaderboard/test_leaderboard_diagnostics.py)
    and nothing for a model whose encoding is not PRISM, without running it."""
    ran = []
    assert pezoo.card_of("prism").diagnostics(pezoo.create("nope"), lambda: ran.append(1)) is None
    assert ran == []


def test_lm_claims_are_data_on_the_card_of_the_paper_that_makes_them():
    import dataclasses

    from pezoo import LmPaperClaim, LmRowSelector

    found = {c.key: (name, c) for name, card in pezoo.cards().items() for c in card.lm_claims}
    assert {k: name for k, (name, _) in found.items() if k.startswith(("xpos", "ape", "pi", "yarn"))} == {
        "xpos_blockwise": "xpos",
        "xpos_plain_blowup": "xpos",
        "ape_blowup": "alibi",  # ALiBi's paper makes it
        "pi_finetuned": "rope",
        "yarn_finetuned": "rope",
        "yarn_dynamic_zero_shot": "rope",
    }
    for _, claim in found.values():
        assert isinstance(claim, LmPaperClaim)
        for selector in (claim.row, *claim.against):  # data only: nothing for pezoo to run on a board's types
            assert isinstance(selector, LmRowSelector) and selector.pe in ENCODINGS
            assert not any(callable(getattr(selector, f.name)) for f in dataclasses.fields(selector))


def test_every_registered_encoding_has_a_family_read_from_its_hooks_or_its_card():
    """Plots group encodings by where they put position (pezoo.family_of): every registered name,
    wrapped or not, gets one of FAMILIES, derived from the hooks its class does its own work in
    unless its card declares it; a wrapped name takes its base's."""
    from pezoo.interface import defines_hook
    from pezoo.registry import FAMILY_HOOKS

    for name in pezoo.available():
        assert pezoo.family_of(name) in pezoo.FAMILIES, name
        base = name.rpartition(":")[2]
        if ":" in name:
            assert pezoo.family_of(name) == pezoo.family_of(base)
            continue
        cls = pezoo.get(name)
        declared = pezoo.card_of(name).family
        hooks = [f for f, names in FAMILY_HOOKS if any(defines_hook(cls, h) for h in names)]
        assert pezoo.family_of(name) == (declared or (hooks[0] if hooks else "none")), name
    assert pezoo.family_of("no_such_encoding") == "other"


class _Bias(pezoo.PositionalEncoding):
    def bias(self, layer, q, k, ctx):
        return []


class _Rotating(_Bias):
    def qk(self, layer, q, k, ctx):
        return q, k


def test_a_family_is_the_first_hook_family_a_class_overrides(monkeypatch):
    from pezoo.registry import ENCODINGS

    monkeypatch.setitem(ENCODINGS._factories, "_bias_only", _Bias)
    monkeypatch.setitem(ENCODINGS._factories, "_rotating", _Rotating)
    assert pezoo.family_of("_bias_only") == "bias"
    assert pezoo.family_of("_rotating") == "qk"  # q/k first: a mask beside a rotation does not make it a bias
    assert pezoo.family_of("_bias_only+_rotating") == "other"  # parts that disagree
