"""The passkey grid: its samples against a reference written from the format's statement, its
draws under a seed, its scoring on hand-built stand-ins and a tiny trained run, its record."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace

import pytest
import torch
from lm_fixtures import tiny_corpus
from torch import nn

from harness.config import preset_config
from harness.evaluation.lm import evaluate_passkey
from harness.execution.run import execute
from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord
from harness.records.lm_metrics import PasskeyCell
from harness.records.store import Store
from harness.tasks.lm.data import scored_regions
from harness.tasks.lm.passkey import DEPTHS, passkey_lengths, passkey_samples
from harness.tasks.lm.split import split

CPU = torch.device("cpu")
LENGTHS = (128, 256, 512)


@pytest.fixture(scope="module")
def parts():
    return split(tiny_corpus())


@pytest.fixture(scope="module")
def regions(parts):
    return [r.data for r in scored_regions(parts, LENGTHS[-1], 3)]


def reference(filler: bytes, key: str, depth: int) -> bytes:
    """The sample the format states, written out here: the needle at depth % of the filler
    (rounded down), then the question and the answer."""
    needle = f"\nThe pass key is {key}. Remember it. {key} is the pass key.\n".encode()
    at = len(filler) * depth // 100
    return filler[:at] + needle + filler[at:] + f"\nWhat is the pass key? The pass key is {key}".encode()


def test_a_sample_is_its_length_exactly_with_the_key_at_its_depth_in_held_out_text(parts, regions):
    heldout = [data for _, data in parts.heldout]
    training = b"\x00".join(data for _, data in parts.train)
    for length in LENGTHS:
        drawn = passkey_samples(regions, length, 4, seed=0)
        assert [(x.index, x.depth) for x in drawn] == [(i, d) for i in range(4) for d in DEPTHS]
        for x in drawn:
            filler = regions[x.region][x.offset : x.offset + length - 104]
            assert len(x.text) == length and len(filler) == length - 104
            assert x.key.isdigit() and len(x.key) == 5 and x.key[0] != "0"
            assert x.text == reference(filler, x.key, x.depth)
            assert x.text.index(b"The pass key is") == x.at + 1 and x.answer == f" {x.key}".encode()
            # the filler is held-out text and shares no 64-byte run with the training text
            assert any(filler in doc for doc in heldout)
            assert not any(filler[i : i + 64] in training for i in range(max(1, len(filler) - 63)))
        for i in range(4):  # the depths of one draw differ only in where the needle is
            same = [x for x in drawn if x.index == i]
            assert len({(x.key, x.region, x.offset) for x in same}) == 1
            assert [x.at for x in same] == [(length - 104) * d // 100 for d in DEPTHS]
    # depth 0: the needle is the first thing after BOS; depth 100: right before the question
    x0, x100 = passkey_samples(regions, 256, 1, seed=0)[0], passkey_samples(regions, 256, 1, seed=0)[-1]
    assert x0.text.startswith(b"\nThe pass key is") and x100.text.endswith(
        f"is the pass key.\n\nWhat is the pass key? The pass key is {x100.key}".encode()
    )


def test_the_draws_are_fixed_by_the_seed(regions):
    a = passkey_samples(regions, 256, 8, seed=0)
    assert a == passkey_samples(regions, 256, 8, seed=0)
    b = passkey_samples(regions, 256, 8, seed=1)
    assert [x.key for x in a] != [x.key for x in b]
    assert len({x.key for x in a}) > 1  # the draws of one seed differ among themselves
    assert passkey_samples(regions, 512, 8, seed=0)[0].key != a[0].key or a[5].key != a[0].key


def test_the_grid_takes_the_lengths_with_room_for_filler():
    assert passkey_lengths((32, 64, 104, 105, 128)) == (105, 128)
    with pytest.raises(ValueError, match="no room for filler"):
        passkey_samples([b"x" * 200], 104, 1, seed=0)


K = 15
"""The copy stand-in's match length: ``The pass key is``."""


def copy_next(context: bytes, window: int | None) -> int:
    """The byte that followed the first earlier occurrence of the context's last K bytes, looking
    at its last ``window`` bytes only (an induction head); 0 when none."""
    seen = context if window is None else context[-window:]
    if len(seen) <= K:
        return 0
    at = seen.find(seen[-K:])
    return seen[at + K] if at + K < len(seen) else 0


class Copier(nn.Module):
    """A hand-built stand-in for a trained model, with the interface evaluation calls (``start_state``,
    ``forward(tokens, state=)``, ``pe``): it predicts every next byte by :func:`copy_next`, with a
    one-hot logit; ``max_position`` bounds its positions as a learned table's would."""

    def __init__(self, window: int | None = None, max_position: int | None = None) -> None:
        super().__init__()
        self.window = window
        self.pe = SimpleNamespace(max_position=max_position, drawing_from=lambda generator: contextlib.nullcontext())

    def start_state(self, batch: int, max_length: int, device=None):
        return {"seen": [b"" for _ in range(batch)]}

    def forward(self, tokens, *, state):
        b, c = tokens.shape
        logits = torch.zeros(b, c, 257)
        for i in range(b):
            for j, t in enumerate(tokens[i].tolist()):
                if t < 256:  # BOS starts the window and is no byte of the text
                    state["seen"][i] += bytes([t])
                logits[i, j, copy_next(state["seen"][i], self.window)] = 1.0
        return logits


def greedy_right(x, window: int | None) -> bool:
    """Whether the copier's greedy decode after the sample's question is its answer."""
    context = x.text[: -len(x.answer)]
    for _ in range(len(x.answer)):
        context += bytes([copy_next(context, window)])
    return context == x.text


def grid(model, regions, samples=4, **kw):
    options = {"chunk": 40, "batch_size": 3, "precision": "fp32", "device": CPU, "seed": 0} | kw
    return evaluate_passkey(model, regions, LENGTHS, samples, **options)


def test_a_model_that_retrieves_the_key_gets_every_cell_and_one_that_cannot_none(regions):
    assert grid(Copier(), regions) == [PasskeyCell(s, d, 4, 4) for s in LENGTHS for d in DEPTHS]
    blind = Copier(window=K)  # sees no more than the question's own last bytes
    assert grid(blind, regions) == [PasskeyCell(s, d, 0, 4) for s in LENGTHS for d in DEPTHS]


def test_the_read_off_equals_the_greedy_decode_at_every_depth(regions):
    """A copier that sees its last 200 bytes finds the key only where the needle is that near
    the question: the grid counts what the greedy decode gives, sample by sample."""
    cells = grid(Copier(window=200), regions, samples=6)
    for cell in cells:
        drawn = [x for x in passkey_samples(regions, cell.length, 6, seed=0) if x.depth == cell.depth]
        assert cell.right == sum(greedy_right(x, 200) for x in drawn) and cell.total == 6
    at = {(c.length, c.depth): c.right for c in cells}
    assert at[128, 0] == at[512, 100] == 6 and at[512, 0] == 0  # near: found; far: not


def test_a_length_the_encoding_cannot_reach_is_recorded_as_such(regions):
    cells = grid(Copier(max_position=300), regions, samples=2)
    assert [c.reached for c in cells] == [s <= 300 for s in LENGTHS for _ in DEPTHS]
    assert all(c.total == c.right == 0 and "positions 0..299" in c.note for c in cells if not c.reached)


TRAINED = {
    "train": {"steps": 3, "batch_size": 2},
    "eval": {"lengths": (32, 64, 128, 256), "regions": 1, "tail": 32, "passkey": 3},
}


def test_a_trained_run_records_its_grid_and_the_record_round_trips(tmp_path, monkeypatch):
    from harness.tasks.lm import corpora

    corpus = tiny_corpus("en")
    monkeypatch.setitem(corpora.CORPORA, "en", lambda **_: corpus)
    monkeypatch.setitem(corpora._LOADED, "en", corpus)
    cfg = preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0, overrides=TRAINED)
    grids = []
    for name in ("a.db", "b.db"):
        store = Store(tmp_path / name)
        assert execute(cfg, store, CPU, notice=lambda _: None).status == "finished"
        record = store.record(cfg.run_id())
        assert record.problems() == [] and record.lm.passkey is not None
        grids.append(record.lm.passkey)
    cells = grids[0]
    assert [(c.length, c.depth, c.total) for c in cells] == [(s, d, 3) for s in (128, 256) for d in DEPTHS]
    assert all(0 <= c.right <= 3 and c.reached for c in cells)
    assert grids[1] == cells  # the same seed draws and scores the same grid
    assert LmRecord.of_run(record).passkey == cells  # the page's view reads it as the record holds it


def record_dict(passkey: int, cells: list[dict] | None) -> dict:
    evals = {"passkey": passkey, "positions": False}  # no curves by position: not what is tested
    cfg = lm_preset_config("lm_smoke", pe="alibi", task="lm_en", seed=0, overrides={"eval": evals})
    scores = [
        {"mode": m, "length": s, "nats": 1.0, "bytes": 8, "reached": True, "note": ""}
        for m, lengths in (("windows", (32, 64, 128)), ("tail", (32, 64, 128)))
        for s in lengths
    ]
    body = {
        "schema": "pezoo-lm-run/2",
        "run_id": cfg.run_id(),
        "config": cfg.to_dict(),
        "scores": scores,
        "final_loss": 1.0,
        "train_steps": 1,
        "train_seconds": 1.0,
        "eval_seconds": 1.0,
        "n_params": {},
        "provenance": {"corpus_sha256": "ab"},
    }
    if cells is not None:
        body["passkey"] = cells
    from harness.lm.record import checksum

    return {**body, "checksum": checksum(body)}


def cells_at_128(right: int = 1, total: int = 2) -> list[dict]:
    return [{"length": 128, "depth": d, "right": right, "total": total, "reached": True, "note": ""} for d in DEPTHS]


def test_records_keep_the_grid_as_counts_and_old_records_read_as_not_measured():
    old = LmRecord.from_dict(record_dict(0, None))  # as every record before the grid
    assert old.passkey is None and "passkey" not in old.config.to_dict()["eval"]
    assert LmRecord.from_dict(record_dict(0, None)).run_id == old.run_id
    new = LmRecord.from_dict(record_dict(2, cells_at_128()))
    assert new.passkey == tuple(PasskeyCell(128, d, 1, 2) for d in DEPTHS)
    assert LmRecord.from_dict(json.loads(json.dumps(new.to_dict()))) == new
    assert new.run_id != old.run_id  # a grid asked for is another evaluation: another run


@pytest.mark.parametrize(
    ("passkey", "cells", "message"),
    [
        (0, cells_at_128(), "exactly when its config's eval.passkey"),
        (2, None, "exactly when its config's eval.passkey"),
        (2, cells_at_128(right=3), "0..2 right of 2"),
        (2, cells_at_128(total=3), "0..2 right of 2"),
        (2, cells_at_128()[:4], "passkey cells missing"),
        (2, [*cells_at_128(), {**cells_at_128()[0], "length": 64}], "is not tested"),
        (2, [*cells_at_128(), cells_at_128()[0]], "two passkey cells"),
        (2, [{**c, "reached": False} for c in cells_at_128()], "counts nothing and says why"),
        (2, [{**c, "right": 1.0} for c in cells_at_128()], "integers"),
    ],
)
def test_a_grid_that_breaks_its_rules_is_refused(passkey, cells, message):
    with pytest.raises(ValueError, match=message):
        LmRecord.from_dict(record_dict(passkey, cells))
