"""Stand-ins for the docs' examples (tests/test_docs_examples.py): what a page's
``<!-- docs-test: setup ... -->`` marker calls where its example needs something a test
cannot have (a downloaded checkpoint, your results store, the published board, your model).
Each writes only into the working directory, which the test makes a temporary folder."""

from __future__ import annotations

import importlib.util
import sys
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import pytest
import torch

TESTS = Path(__file__).resolve().parent

CLEANUP = ExitStack()
"""What a setup changed outside its page's namespace; the test undoes it after the page's last example."""


def _suite_module(relative: str) -> ModuleType:
    """A helper module from a subfolder of tests/ (not on ``sys.path`` for this test file), by path."""
    path = TESTS / relative
    if path.stem not in sys.modules:
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    return sys.modules[path.stem]


def tiny_checkpoint(folder: str = "tiny-llama") -> tuple[str, torch.Tensor, torch.Tensor]:
    """A tiny random Llama saved as a checkpoint in ``folder`` (tests/pezoo/hf_tiny.py's: no
    download), and a left-padded prompt for it: ``(path, input_ids, attention_mask)``."""
    pytest.importorskip("transformers")  # pezoo.hf's optional dependency, as tests/pezoo/test_hf.py
    hf_tiny = _suite_module("pezoo/hf_tiny.py")
    torch.manual_seed(0)
    hf_tiny.tiny("llama").save_pretrained(folder)
    input_ids, attention_mask = hf_tiny.batch()
    return folder, input_ids, attention_mask


def mini_gpt(pe: torch.nn.Module, d_model: int, n_heads: int, n_layers: int, vocab: int = 10) -> torch.nn.Module:
    """tests/pezoo/test_use_in_your_model.py's ``MiniGPT``, the model whose forward
    docs/use-in-your-model.md shows (its ``self``)."""
    module = _suite_module("pezoo/test_use_in_your_model.py")
    torch.manual_seed(0)
    return module.MiniGPT(pe, vocab, d_model, n_heads, n_layers)


def smoke_store(path: str) -> None:
    """A results store at ``path`` holding one finished smoke-preset run (made-up metrics)."""
    from harness.config import preset_config
    from harness.evaluation.evaluate import LengthMetrics
    from harness.records.store import Store

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0)
    with Store(path) as store:
        run_id = store.start(cfg, {"commit": "docs", "device": "cpu:docs x1 threads"})
        metrics = [("train", LengthMetrics(n, float(n), 4, 4, 4 * n, 4 * n)) for n in cfg.train_lengths()]
        metrics += [("test", LengthMetrics(n, float(n), 4, 1, 4 * n, 2 * n)) for n in cfg.test_lengths()]
        store.finish(
            run_id, metrics, final_loss=0.1, train_seconds=1.0, eval_seconds=0.0, n_params={"total": 1, "pe": 0}
        )


def small_board(folder: str = "my/results") -> None:
    """A results folder at ``folder`` (two encodings, three seeds each, on two tables of copy, made-up metrics,
    tests/leaderboard/leaderboard_fixtures.py's records), which also stands in for the
    published board (``leaderboard.read_results()``'s default; reading the real one takes
    seconds) until the page's examples are done."""
    import leaderboard.frames

    fixtures = _suite_module("leaderboard/leaderboard_fixtures.py")
    em = {"rope": [1.0, 1.0, 1.0, 0.5, 0.0], "alibi": [1.0, 1.0, 1.0, 1.0, 0.75]}  # trained on 1..3
    records = [
        fixtures.make_record(pe, "copy", seed, dict(enumerate(em[pe] + extra, 1)), train_max=3)
        for extra in ([], [0.0])  # copy tested to 5 and to 6: two tables of one task, as the board's copy
        for pe in em
        for seed in range(3)
    ]
    fixtures.write_jsonl(Path(folder) / "smoke-20261124-000000000000.jsonl", records)
    published = leaderboard.frames.DEFAULT_RESULTS
    CLEANUP.callback(setattr, leaderboard.frames, "DEFAULT_RESULTS", published)
    leaderboard.frames.DEFAULT_RESULTS = Path(folder).resolve()
