"""Your own model: a byte-level Llama saved to a folder, adapted with pezoo.hf, scored like a run."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from click.testing import CliRunner
from lm_fixtures import tiny_corpus, use_tiny_corpus

from harness.lm.hf import hf_scores
from harness.tasks.lm import corpora

transformers = pytest.importorskip("transformers")


def llama(vocab_size: int = 260):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return transformers.LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A byte-level Llama (260 ids, no tokenizer) saved to a folder."""
    folder = tmp_path_factory.mktemp("llama")
    llama().save_pretrained(folder)
    return folder


def test_a_saved_byte_level_model_gets_every_length_and_mode(saved):
    scores = hf_scores(saved, "alibi", tiny_corpus(), (32, 64), regions=1, tail=32, chunk=24, as_bytes=True)
    assert [(s.mode, s.length, s.n_bytes) for s in scores] == [
        ("windows", 32, 64),
        ("windows", 64, 64),
        ("tail", 32, 32),
        ("tail", 64, 32),
    ]
    # an untrained model is near uniform over its 260 ids: about log2(260) bits per byte
    assert all(7.0 < s.bpb < 9.5 for s in scores)
    # the tail at 32 is the region's second window of 32; fed through the cache in blocks of 24
    # or in one block of 64, the scores agree
    assert scores[2].nats < scores[0].nats
    whole = hf_scores(saved, "alibi", tiny_corpus(), (32, 64), regions=1, tail=32, chunk=64, as_bytes=True)
    assert [s.nats for s in whole] == pytest.approx([s.nats for s in scores], rel=1e-5)


def test_a_model_without_a_tokenizer_is_read_as_bytes_only_when_asked(saved):
    """A folder whose tokenizer files are missing was read as bytes whenever it had 257+ ids:
    a 32k-token model scored as bytes, silently. Now only with as_bytes (--bytes)."""
    with pytest.raises(ValueError, match="no tokenizer"):
        hf_scores(saved, "alibi", tiny_corpus(), (32, 64), regions=1, tail=32)


def test_a_model_saved_after_use_encoding_is_scored_with_its_encoding(tmp_path, saved):
    import pezoo.hf

    adapted = tmp_path / "adapted"
    pezoo.hf.use_encoding(llama(), "alibi").save_pretrained(adapted)  # the same weights as `saved`, adapted
    kw = {"regions": 1, "tail": 32, "as_bytes": True}
    own = hf_scores(adapted, None, tiny_corpus(), (32, 64), **kw)  # its recorded encoding
    assert [s.nats for s in own] == pytest.approx(
        [s.nats for s in hf_scores(saved, "alibi", tiny_corpus(), (32, 64), **kw)], rel=1e-5
    )
    assert [s.nats for s in hf_scores(adapted, "alibi", tiny_corpus(), (32, 64), **kw)] == [s.nats for s in own]
    with pytest.raises(ValueError, match="saved with encoding 'alibi'"):
        hf_scores(adapted, "rope", tiny_corpus(), (32, 64), **kw)


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Fails the test if the model's weights or the corpus are loaded."""
    loaded: list[str] = []

    def model(*args, **kwargs):
        loaded.append("model")
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model)
    monkeypatch.delitem(corpora._LOADED, "en", raising=False)
    monkeypatch.setitem(corpora.CORPORA, "en", lambda **_: loaded.append("corpus") or tiny_corpus())
    return loaded


@pytest.mark.parametrize(
    "args",
    [
        ("--pe", "no_such_pe"),
        ("--pe", "alibi{"),
        ("--pe", "alibi{no_such_option=1}"),
        ("--pe", "rope@{scaling={rope_type=linear,factor=2.0}}"),
        ("--pe", "alibi{" + "a=1," * 250_000 + "}"),  # 1 MB: not echoed whole
        ("--pe", "no_such_pe" * 100_000),
        ("--pe", "alibi", "--lengths", "0"),
        ("--pe", "alibi", "--lengths", "0,32"),
        ("--pe", "alibi", "--lengths", "32,32"),
        ("--pe", "alibi", "--lengths", "32,48"),
        ("--pe", "alibi", "--lengths", ""),
        ("--pe", "alibi", "--lengths", "1000000"),
        ("--pe", "alibi"),  # no tokenizer, no --bytes
        (),  # no encoding: the folder records none
    ],
)
def test_bad_arguments_are_clear_errors_before_anything_is_loaded(saved, nothing_loaded, args):
    from harness.cli import main

    result = CliRunner().invoke(main, ["lm", "hf", str(saved), *args, "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert len(result.output) < 2000 and nothing_loaded == []


@pytest.mark.parametrize("lengths", ["", "abc", "256,,512", "256,1e3"])
def test_lengths_that_are_not_numbers_are_named_with_the_option(tmp_path, lengths):
    """They said "invalid literal for int() with base 10: ''", naming neither --lengths nor its value."""
    from harness.cli import main

    result = CliRunner().invoke(main, ["lm", "hf", str(tmp_path), "--pe", "alibi", "--lengths", lengths])
    assert result.exit_code == 2, result.output
    assert f"--lengths takes comma-separated whole numbers of bytes, e.g. 256,512, got {lengths!r}" in result.output
    assert "invalid literal" not in result.output


def test_a_config_far_larger_than_its_weights_is_refused_before_loading(tmp_path, nothing_loaded):
    """n_positions=1e9 over a file of 128 rows: refused from the config, nothing allocated."""
    from harness.cli import main

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=260, n_embd=32, n_layer=1, n_head=2))
    gpt2.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "n_positions": 10**9}))
    result = CliRunner().invoke(main, ["lm", "hf", str(tmp_path), "--pe", "alibi", "--bytes", "--device", "cpu"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), repr(result.exception)
    assert "parameters" in result.output and nothing_loaded == []


@pytest.mark.parametrize(
    ("config", "said", "not_said"),
    [  # transformers' validation puts its reason on the second line, which was dropped
        ({"hidden_size": 10, "num_attention_heads": 3}, "is not a multiple of the number of attention heads", None),
        # a model transformers cannot build was blamed on the encoding ("encoding 'rope': TypeError: ...")
        ({"rope_scaling": {"rope_type": "yarn", "factor": "big"}}, "transformers cannot build the model", "encoding"),
    ],
)
def test_a_config_transformers_refuses_is_named_as_the_config_s_fault(tmp_path, nothing_loaded, config, said, not_said):
    from harness.cli import main

    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
            "intermediate_size": 64, "vocab_size": 300}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps({**base, **config}))
    result = CliRunner().invoke(main, ["lm", "hf", str(tmp_path), "--pe", "rope", "--bytes", "--device", "cpu"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), repr(result.exception)
    assert said in result.output and (not_said is None or not_said not in result.output), result.output


class _Runs:
    def __reduce__(self):
        return (print, ("pickle code ran",))


def test_a_pickle_that_needs_code_is_a_clear_error_and_never_runs(tmp_path, saved, monkeypatch):
    """A .bin whose pickle would run code: torch's weights-only loader refuses it; the command
    says so in one line, naming the folder."""
    from harness.cli import main

    use_tiny_corpus(monkeypatch)
    (tmp_path / "config.json").write_text((saved / "config.json").read_text())
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        pickle.dump({"model.embed_tokens.weight": _Runs(), "padding": bytes(100_000)}, f)  # weights' size
    result = CliRunner().invoke(main, ["lm", "hf", str(tmp_path), "--pe", "alibi", "--bytes", "--device", "cpu"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), repr(result.exception)
    assert str(tmp_path) in result.output and "safetensors" in result.output and "weights_only" not in result.output
    assert "pickle code ran" not in result.output


class _ByteTokenizer:
    """A stand-in tokenizer whose tokens are the text's UTF-8 bytes (BOS 256): the tokenizer path
    of the passkey grid on the byte-level model."""

    bos_token_id, eos_token_id = 256, None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": list(text.encode())}

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def test_the_passkey_grid_of_your_own_model_counts_greedy_answers_per_length_and_depth(saved, monkeypatch):
    from harness.cli import main
    from harness.lm.hf import check_hf, load_hf, passkey_hf
    from harness.tasks.lm.passkey import DEPTHS

    check = check_hf(saved, "alibi", (64, 128, 256), regions=1, tail=32, chunk=48, as_bytes=True)
    model, _ = load_hf(check, torch.device("cpu"))
    cells = passkey_hf(check, model, None, tiny_corpus(), torch.device("cpu"), 2)
    assert [(c.length, c.depth, c.total, c.reached) for c in cells] == [
        (s, d, 2, True) for s in (128, 256) for d in DEPTHS
    ]  # 64 bytes hold no filler beside the 104 of needle, question and answer
    assert all(0 <= c.right <= 2 for c in cells)
    assert passkey_hf(check, model, None, tiny_corpus(), torch.device("cpu"), 2) == cells
    tokenized = passkey_hf(check, model, _ByteTokenizer(), tiny_corpus(), torch.device("cpu"), 2)
    assert [(c.length, c.depth, c.total) for c in tokenized] == [(c.length, c.depth, c.total) for c in cells]

    use_tiny_corpus(monkeypatch)
    args = ["lm", "hf", str(saved), "--pe", "alibi", "--bytes", "--lengths", "64,128", "--regions", "1"]
    result = CliRunner().invoke(main, [*args, "--tail", "64", "--passkey", "1", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "passkey retrieval, samples right of 1 per depth" in result.output
    assert result.output.rstrip().splitlines()[-1].split()[0] == "128"
