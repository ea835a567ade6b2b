"""The Turing-Programs protocol: packed training rows, linear decay, sliding-window
decoding and teacher forcing, final-answer exact match (docs/harness.md).

References here are written independently of the code under test: the stream is parsed
back into examples, contexts come from simulating "drop the oldest ``jump`` tokens when
the window overflows", and windowed predictions are recomputed one context at a time."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from harness.config import EvalConfig, RunConfig, TrainConfig, preset_config
from harness.evaluation.evaluate import (
    answer_matches,
    context_start,
    evaluate_length,
    greedy_decode,
    windowed_predictions,
)
from harness.execution.preflight import check_run
from harness.execution.run import train_and_evaluate
from harness.tasks import create
from harness.tasks.data import IGNORE, PackedStream, evaluation_set
from harness.tasks.vocab import BOS_ID, EOS_ID, SEP_ID, decode, encode
from harness.training.train import Checkpointing, build_model, lr_factor, restore, train


def simulated_starts(length: int, window: int, jump: int) -> list[int]:
    """Per position t, the first position of the context predicting the token after t:
    append t, and whenever the context holds more than ``window`` tokens drop ``jump``."""
    context, starts = [], []
    for t in range(length):
        context.append(t)
        if len(context) > window:
            context = context[jump:]
        starts.append(context[0])
    return starts


@pytest.mark.parametrize(("window", "jump"), [(7, 3), (8, 1), (12, 4), (5, 4)])
def test_context_start_is_the_drop_oldest_when_full_rule(window, jump):
    assert [context_start(t, window, jump) for t in range(60)] == simulated_starts(60, window, jump)
    assert all(context_start(t, 0, jump) == 0 for t in range(60))  # no window


def stream_of(task, seed: int, width: int, batches: int, batch_size: int, lo: int, hi: int, loss: str = "all"):
    stream = PackedStream(task, random.Random(seed), width, loss=loss)
    return [stream.batch(batch_size, lo, hi) for _ in range(batches)]


def test_packed_rows_cut_one_stream_of_valid_examples_into_consecutive_windows():
    task, width = create("copy"), 16
    batches = stream_of(task, 0, width, batches=3, batch_size=4, lo=2, hi=5)
    for batch in batches:
        assert batch.inputs.shape == batch.labels.shape == (4, width)
        assert torch.equal(batch.inputs[:, 1:], batch.labels[:, :-1])  # labels: the next token
        assert torch.equal(batch.inputs[1:, 0], batch.labels[:-1, -1])  # rows continue each other
    for first, second in itertools.pairwise(batches):
        assert second.inputs[0, 0] == first.labels[-1, -1]  # so do batches
    # the stream, read back: <bos> prompt = prompt <eos>, repeated, scales within lo..hi
    tokens = [batches[0].inputs[0, 0].item()] + [x for b in batches for x in b.labels.flatten().tolist()]
    assert tokens[0] == BOS_ID
    examples = []
    for start in [i for i, x in enumerate(tokens) if x == BOS_ID][:-1]:
        end = tokens.index(EOS_ID, start)
        segment = tokens[start + 1 : end]
        sep = segment.index(SEP_ID)
        examples.append((decode(segment[:sep]), decode(segment[sep + 1 :])))
        assert tokens[end + 1] == BOS_ID  # examples follow each other directly
    assert len(examples) > 5
    for prompt, target in examples:
        assert 2 <= len(prompt) <= 5 and target == task.solve(tuple(prompt))
    # each token's scale is that of the example it belongs to (copy: the prompt's length)
    starts = [i for i, x in enumerate(tokens) if x == BOS_ID]
    for k, batch in enumerate(batches):
        assert batch.scales.shape == (4, width)
        for r in range(4):
            for t in range(width):
                index = k * 4 * width + r * width + t  # the token's index in the stream
                owner = starts.index(max(i for i in starts if i <= index))
                if owner < len(examples):  # the stream's last example is cut off: not parsed
                    assert batch.scales[r, t] == len(examples[owner][0])


def test_completion_loss_labels_exactly_the_targets_and_their_eos():
    task = create("reverse")
    all_tokens = stream_of(task, 1, 12, batches=2, batch_size=3, lo=1, hi=4)
    completion = stream_of(task, 1, 12, batches=2, batch_size=3, lo=1, hi=4, loss="completion")
    for full, masked in zip(all_tokens, completion, strict=True):
        assert torch.equal(full.inputs, masked.inputs)
        assert (full.labels != IGNORE).all()
        # a label is a target token iff an "=" came after the latest <bos> before it
        rows = zip(full.inputs.tolist(), full.labels.tolist(), masked.labels.tolist(), strict=True)
        for row_in, row_full, row_masked in rows:
            for t, label in enumerate(row_full):
                before = row_in[: t + 1]
                last_bos = max((i for i, x in enumerate(before) if x == BOS_ID), default=None)
                last_sep = max((i for i, x in enumerate(before) if x == SEP_ID), default=None)
                if last_bos is None:  # the row starts mid-example: decided by what it sees first
                    continue
                in_target = last_sep is not None and last_sep > last_bos and label != BOS_ID
                assert (row_masked[t] != IGNORE) == in_target, (row_in, t)


def test_packed_stream_continues_identically_from_its_saved_state():
    task = create("copy")
    straight = stream_of(task, 2, 10, batches=4, batch_size=2, lo=1, hi=6)
    rng = random.Random(2)
    first = PackedStream(task, rng, 10)
    first.batch(2, 1, 6), first.batch(2, 1, 6)
    saved, rng_state = first.state(), rng.getstate()
    rng2 = random.Random()
    rng2.setstate(rng_state)
    second = PackedStream(task, rng2, 10)
    second.load_state(saved)
    for want in straight[2:]:
        got = second.batch(2, 1, 6)
        assert torch.equal(got.inputs, want.inputs) and torch.equal(got.labels, want.labels)


def test_linear_schedule_decays_in_a_straight_line():
    cfg = RunConfig(
        pe="nope", task="copy", train=TrainConfig(steps=110, warmup=10, schedule="linear", min_lr_ratio=0.0)
    )
    assert lr_factor(9, cfg) == pytest.approx(1.0)
    assert lr_factor(10, cfg) == pytest.approx(1.0)
    assert lr_factor(60, cfg) == pytest.approx(0.5)
    assert lr_factor(109, cfg) == pytest.approx(0.01)


def test_bad_protocol_options_are_refused_plainly():
    with pytest.raises(ValueError, match="pack is a row width"):
        TrainConfig(pack=1)
    with pytest.raises(ValueError, match="unknown schedule 'step'; valid: cosine, linear"):
        TrainConfig(schedule="step")
    with pytest.raises(ValueError, match=r"eval\.window must be larger than eval\.window_jump"):
        EvalConfig(window=20, window_jump=20)
    with pytest.raises(ValueError, match=r"unknown eval\.match"):
        EvalConfig(match="final")
    with pytest.raises(ValueError, match="decoder protocol"):
        preset_config("ruoss", pe="nope", task="dm_odds_first", seed=0, overrides={"train": {"pack": 64}})
    with pytest.raises(ValueError, match="decoder protocol"):
        preset_config("ruoss", pe="nope", task="dm_odds_first", seed=0, overrides={"eval": {"match": "answer"}})
    with pytest.raises(ValueError, match=r"eval\.window must be >= 0"):
        EvalConfig(window=-5)


def test_a_scale_hint_encoding_trains_on_packed_rows_with_one_n_per_token():
    cfg = preset_config(
        "smoke", pe="learned_prf_sh", task="copy", seed=0, overrides={"train": {"pack": 24, "steps": 3}}
    )
    check_run(cfg)
    result = train(cfg, build_model(cfg), create("copy"))
    assert math.isfinite(result.final_loss)


def test_the_turing_preset_packs_decodes_in_a_window_and_scores_the_answer():
    cfg = preset_config("turing", pe="hard_alibi", task="addition_turing", seed=0)
    assert (cfg.train.pack, cfg.train.schedule, cfg.train.min_lr_ratio) == (500, "linear", 0.0)
    assert (cfg.eval.window, cfg.eval.window_jump, cfg.eval.match) == (500, 20, "answer")
    check_run(cfg)
    assert preset_config("quick", pe="nope", task="copy", seed=0).train.pack == 0


def test_answer_match_reads_what_follows_the_last_line():
    task = create("addition_turing")
    example = task.sample(6, random.Random(3))
    a, b = "".join(example.prompt).split("+")
    assert int("".join(task.answer(example.target))) == int(a) + int(b)
    target = [*encode(example.target), EOS_ID]
    assert answer_matches(task, target, example.target)
    other_trace = [*encode(("1", "|", *task.answer(example.target))), EOS_ID, EOS_ID]
    assert answer_matches(task, other_trace, example.target)
    assert not answer_matches(task, target[:-1], example.target)  # never ended
    wrong = [*encode(("|", "9", *task.answer(example.target))), EOS_ID]
    assert not answer_matches(task, wrong, example.target)
    bare = [*encode(task.answer(example.target)), EOS_ID]
    assert not answer_matches(task, bare, example.target)  # the answer without any scratchpad
    assert create("copy").answer(("1", "2")) == ("1", "2")  # no separator: the whole target


def smoke_model(pe: str):
    """A smoke-sized model with large random block weights: an untrained model at the
    usual init mostly echoes its input token, whatever the context; this one's argmax
    depends on the context, so a wrong context shows."""
    model = build_model(preset_config("smoke", pe=pe, task="copy", seed=0)).eval()
    with torch.no_grad():
        for name, param in model.blocks.named_parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    return model


@pytest.mark.parametrize("pe", ["nope", "rope", "alibi", "hard_alibi", "prism"])
def test_windowed_greedy_decoding_equals_decoding_each_context_from_scratch(pe):
    model = smoke_model(pe)
    window, jump, max_new = 11, 4, 25
    prompts = torch.randint(4, 14, (3, 7), generator=torch.Generator().manual_seed(1))
    got = greedy_decode(model, prompts, max_new, window=window, jump=jump)
    starts = simulated_starts(prompts.shape[1] + max_new, window, jump)
    seq = prompts
    for t in range(max_new):
        last = seq.shape[1] - 1
        nxt = model(seq[:, starts[last] :])[:, -1].argmax(-1)
        # rows that ended keep emitting EOS in the decoder's output
        want = torch.where((got[:, :t] == EOS_ID).any(-1), torch.full_like(nxt, EOS_ID), nxt)
        assert torch.equal(got[:, t], want), t
        seq = torch.cat([seq, want[:, None]], dim=1)
    wide = greedy_decode(model, prompts, max_new, window=prompts.shape[1] + max_new)
    full = greedy_decode(model, prompts, max_new)
    assert torch.equal(wide, full)  # a window never filled changes nothing
    assert not torch.equal(got, full)  # while this one does: the comparison above has teeth


@pytest.mark.parametrize("pe", ["nope", "rope", "alibi", "hard_alibi", "prism"])
def test_windowed_teacher_forcing_predicts_each_token_from_its_own_context(pe):
    model = smoke_model(pe)
    window, jump = 9, 3
    inputs = torch.randint(4, 14, (2, 30), generator=torch.Generator().manual_seed(2))
    got = windowed_predictions(model, inputs, torch.tensor([5, 5]), window, jump)
    starts = simulated_starts(30, window, jump)
    for t in range(30):
        assert torch.equal(got[:, t], model(inputs[:, starts[t] : t + 1])[:, -1].argmax(-1)), t
    assert not torch.equal(got, model(inputs).argmax(-1))  # the window matters to this model


def test_evaluate_length_under_a_window_matches_one_context_at_a_time():
    model = smoke_model("rope")
    task = create("addition_turing")
    examples = [task.sample(3, random.Random(i)) for i in range(4)]
    wide = evaluate_length(model, examples, batch_size=4, device="cpu", window=1000, jump=20, answer_task=task)
    plain = evaluate_length(model, examples, batch_size=4, device="cpu")
    assert (wide.exact_match, wide.token_accuracy) == (plain.exact_match, plain.token_accuracy)
    narrow = evaluate_length(model, examples, batch_size=4, device="cpu", window=16, jump=4, answer_task=task)
    assert narrow.trace_exact_match is not None and 0.0 <= narrow.token_accuracy <= 1.0


def test_evaluate_length_scores_the_answer_and_reports_the_trace(monkeypatch):
    """A decode with the right answer after a wrong trace: answer match 1, trace match 0."""
    from harness.evaluation import evaluate

    task = create("addition_turing")
    examples = [task.sample_test(4, random.Random(i)) for i in range(3)]
    answers = {"".join(ex.prompt): task.answer(ex.target) for ex in examples}

    def right_answer_wrong_trace(model, prompts, max_new, **kw):
        rows = []
        for row in prompts.tolist():
            prompt = "".join(decode(row[1:-1]))  # drop <bos> and "="
            rows.append(([*encode(("0", "|", *answers[prompt])), EOS_ID] + [EOS_ID] * max_new)[:max_new])
        return torch.tensor(rows)

    def teacher_forced(model, inputs, scales, window=0, jump=20, positions=None):
        return torch.zeros_like(inputs)

    monkeypatch.setattr(evaluate, "greedy_decode", right_answer_wrong_trace)
    monkeypatch.setattr(evaluate, "windowed_predictions", teacher_forced)
    model = smoke_model("nope")
    scored = evaluate_length(model, examples, batch_size=4, device="cpu", answer_task=task)
    assert (scored.exact_match, scored.trace_exact_match) == (1.0, 0.0)
    plain = evaluate_length(model, examples, batch_size=4, device="cpu")
    assert (plain.exact_match, plain.trace_exact_match) == (0.0, None)


def test_turing_addition_tests_both_operands_at_n_and_trains_on_unequal_ones():
    task = create("addition_turing")
    for i in range(20):
        a, b = "".join(task.sample_test(7, random.Random(i)).prompt).split("+")
        assert len(a) == len(b) == 7
    train = ["".join(task.sample(7, random.Random(i)).prompt).split("+") for i in range(50)]
    assert max(len(a) for a, _ in train) == 7 and any(len(a) != len(b) for a, b in train)
    # every other task tests on its training distribution: the same examples from the same rng
    copy = create("copy")
    assert evaluation_set(copy, 12, 5, 0) == [copy.sample(12, rng) for rng in [random.Random("eval/copy/12/0")] * 5]


def packed_config(**train):
    return preset_config(
        "smoke",
        pe="rope",
        task="addition_turing",
        seed=0,
        overrides={
            "train": {"steps": 16, "train_min": 2, "train_max": 3, "pack": 48, "schedule": "linear", **train},
            "eval": {"test_max": 4, "samples": 4, "window": 32, "window_jump": 8, "match": "answer"},
        },
    )


def test_a_killed_packed_run_resumes_bit_identically(tmp_path):
    cfg = packed_config()
    task = create("addition_turing")
    reference = build_model(cfg)
    want = train(cfg, reference, task)

    class Killed(Exception):
        pass

    def kill(step, loss):
        if step == 12:
            raise Killed

    ckpt = Checkpointing(tmp_path / "ck.pt", every=5)
    with pytest.raises(Killed):
        train(cfg, build_model(cfg), task, on_step=kill, checkpointing=ckpt)
    model, resume, problem = restore(cfg, ckpt.path, "cpu")
    assert problem is None and resume["step"] == 10 and resume["stream"]["ids"]
    got = train(cfg, model, task, checkpointing=ckpt, resume=resume)
    assert got.final_loss == want.final_loss
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_a_packed_windowed_run_trains_evaluates_and_logs_the_trace_score(tmp_path):
    cfg = packed_config()
    notices = []
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ck.pt", notice=notices.append)
    assert result.status == "finished", result.traceback
    assert [n for _, n in ((s, m.length) for s, m in result.metrics)] == [2, 3, 4]
    assert any("full-trace exact match per scale 2:" in n for n in notices)
    assert cfg.run_id() != packed_config(pack_loss="completion").run_id()
