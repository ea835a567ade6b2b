"""Periodic evaluation during training (the PRISM paper's protocol), the rules that pick
which evaluation a run reports, and optional TensorBoard logging."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from click.testing import CliRunner

import harness.tasks as tasks
from harness.cli import main
from harness.config import RunConfig, preset_config
from harness.evaluation.evaluate import LengthMetrics, select_evaluation
from harness.execution.run import train_and_evaluate
from harness.training.train import Checkpointing, build_model, restore, train


def evaluation(train_em, test_em, test_tok=None):
    """An evaluation with one training scale (3) and one test scale per value in test_em."""
    test_tok = test_tok or [0.5] * len(test_em)

    def counts(em, tok):  # 10 examples, 100 tokens: the values are tenths and hundredths
        return round(em * 10), 100, round(tok * 100)

    rows = [("train", LengthMetrics(3, 8.0, 10, *counts(train_em, train_em)))]
    pairs = enumerate(zip(test_em, test_tok, strict=True))
    rows += [("test", LengthMetrics(6 + i, 14.0, 10, *counts(em, tok))) for i, (em, tok) in pairs]
    return tuple(rows)


HISTORY = [
    evaluation(0.2, [0.1, 0.9], [0.11, 0.91]),
    evaluation(1.0, [0.9, 0.2], [0.92, 0.21]),
    evaluation(0.6, [0.5, 0.3], [0.51, 0.31]),
    evaluation(0.9, [0.7, 0.4], [0.71, 0.41]),
]


def test_final_reports_the_last_evaluation():
    assert select_evaluation(HISTORY, "final") == HISTORY[-1]


def test_top3_averages_the_three_best_evaluations_per_length():
    got = {m.length: m for _, m in select_evaluation(HISTORY, "top3")}
    # scale 6: exact matches 0.1, 0.9, 0.5, 0.7 -> best three 0.9, 0.7, 0.5 (evaluations 1, 3, 2)
    assert got[6].exact_match == pytest.approx((0.9 + 0.7 + 0.5) / 3)
    assert got[6].token_accuracy == pytest.approx((0.92 + 0.71 + 0.51) / 3)  # the same three evaluations
    # scale 7: 0.9, 0.2, 0.3, 0.4 -> 0.9, 0.4, 0.3: a different set of checkpoints per length
    assert got[7].exact_match == pytest.approx((0.9 + 0.4 + 0.3) / 3)
    assert got[7].token_accuracy == pytest.approx((0.91 + 0.41 + 0.31) / 3)
    assert got[3].exact_match == pytest.approx((1.0 + 0.9 + 0.6) / 3)
    assert (got[6].n, got[6].token_length) == (30, 14.0)  # the three picks' counts, summed


def test_top3_with_fewer_evaluations_averages_what_there_is():
    got = select_evaluation(HISTORY[:2], "top3")
    assert got[1][1].exact_match == pytest.approx((0.1 + 0.9) / 2)


def test_best_in_dist_picks_one_evaluation_on_the_training_scales_only():
    # evaluation 1 has the best in-distribution score (1.0) though its test scores are poor
    assert select_evaluation(HISTORY, "best_in_dist") == HISTORY[1]
    tied = [evaluation(1.0, [0.3]), evaluation(1.0, [0.1])]
    assert select_evaluation(tied, "best_in_dist") == tied[1]  # ties: the later, longer-trained one


def test_selection_rejects_bad_input():
    with pytest.raises(ValueError, match="no evaluations"):
        select_evaluation([], "top3")
    with pytest.raises(ValueError, match="different scales"):
        select_evaluation([evaluation(1.0, [0.5]), evaluation(1.0, [0.5, 0.5])], "top3")
    with pytest.raises(ValueError, match="valid: final, top3, best_in_dist"):
        select_evaluation(HISTORY, "median")


def test_config_checks_the_selection():
    with pytest.raises(ValueError, match=r"set eval\.every > 0"):
        preset_config("smoke", pe="nope", task="copy", seed=0, overrides={"eval": {"select": "top3"}})
    with pytest.raises(ValueError, match="valid: final, top3, best_in_dist"):
        preset_config("smoke", pe="nope", task="copy", seed=0, overrides={"eval": {"every": 5, "select": "best"}})
    prism = preset_config("prism", pe="prism", task="reverse", seed=0)
    assert (prism.eval.every, prism.eval.start_below_loss, prism.eval.select) == (1000, 0.1, "top3")


def test_run_ids_of_runs_stored_before_periodic_evaluation_are_unchanged():
    # identities computed by the code before EvalConfig grew every/start_below_loss/select
    assert preset_config("smoke", pe="rope", task="copy", seed=0).run_id() == "2da2d3b03c40c983"
    assert preset_config("quick", pe="alibi", task="reverse", seed=1).run_id() == "1ccd1f1e01e72190"
    periodic = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"eval": {"every": 10}})
    assert periodic.run_id() != "2da2d3b03c40c983"
    assert RunConfig.from_dict(periodic.to_dict()).run_id() == periodic.run_id()


def smoke(steps=40, **eval_options) -> RunConfig:
    return preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": steps},
                                                                            "eval": eval_options})  # fmt: skip


def weights_probe(model):
    """An evaluation stand-in that depends on the weights and draws from the torch RNG."""

    def evaluate(step):
        torch.rand(100)  # must not disturb the training stream
        weights = round(sum(p.double().sum().item() for p in model.parameters()), 9)
        # an Evaluation as checkpoints keep them (of scale 1, which the run evaluates), its numbers the step and weights
        return (("train", LengthMetrics(1, abs(weights), step, 0, step, 0)),)

    return evaluate


def test_periodic_evaluations_follow_the_schedule_and_leave_training_unchanged():
    cfg = smoke(every=10)
    task = tasks.create(cfg.task)
    plain_model = build_model(cfg)
    plain = train(cfg, plain_model, task)
    model = build_model(cfg)
    res = train(cfg, model, task, evaluate=weights_probe(model))
    assert [step for step, _ in res.evaluations] == [10, 20, 30]  # the final model is the caller's
    assert res.final_loss == plain.final_loss
    for a, b in zip(model.state_dict().values(), plain_model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_periodic_evaluation_waits_for_the_loss_threshold():
    cfg = smoke(every=10, start_below_loss=1e-9)  # a smoke run never gets there
    model = build_model(cfg)
    assert train(cfg, model, tasks.create(cfg.task), evaluate=weights_probe(model)).evaluations == ()
    cfg = smoke(every=10, start_below_loss=100.0)  # below it from the first step
    model = build_model(cfg)
    assert len(train(cfg, model, tasks.create(cfg.task), evaluate=weights_probe(model)).evaluations) == 3


def test_evaluations_survive_an_interruption(tmp_path):
    cfg = smoke(every=10)
    task = tasks.create(cfg.task)
    model = build_model(cfg)
    reference = train(cfg, model, task, evaluate=weights_probe(model))

    path = tmp_path / "ck.pt"

    def crash(step, loss):
        if step == 24:
            raise KeyboardInterrupt

    model = build_model(cfg)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, model, task, on_step=crash, checkpointing=Checkpointing(path, 10), evaluate=weights_probe(model))
    model, resume, problem = restore(cfg, path, "cpu")
    assert problem is None and resume["step"] == 20
    resumed = train(cfg, model, task, checkpointing=Checkpointing(path, 10), resume=resume,
                    evaluate=weights_probe(model))  # fmt: skip
    assert resumed.evaluations == reference.evaluations
    assert resumed.final_loss == reference.final_loss


def test_a_run_reports_the_selected_evaluation(tmp_path):
    notes = []
    result = train_and_evaluate(smoke(every=10, select="top3"), torch.device("cpu"), tmp_path / "ck.pt",
                                notice=notes.append)  # fmt: skip
    assert result.status == "finished", result.traceback
    assert sum("step " in n and "exact match" in n for n in notes) == 3  # a log line per periodic evaluation
    assert any("reporting top3 of 4 evaluations (steps 10, 20, 30, 40)" in n for n in notes)
    lengths = [m.length for _, m in result.metrics]
    assert lengths == sorted(lengths) and len(lengths) == len(set(lengths))


def test_tensorboard_logs_loss_and_evaluations(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from harness.training.tblog import run_dir

    cfg = smoke(steps=20, every=10)
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ck.pt", notice=lambda _: None,
                                tensorboard=str(tmp_path / "tb"))  # fmt: skip
    assert result.status == "finished", result.traceback
    events = EventAccumulator(str(run_dir(tmp_path / "tb", cfg)))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 21))
    assert [e.value for e in events.Scalars("train/loss")][-1] == pytest.approx(result.final_loss)
    assert [e.step for e in events.Scalars("eval/exact_match_beyond_training")] == [10, 20]
    assert "eval/token_accuracy/len0006" in scalars and "train/lr" in scalars


def test_the_protocol_study_reads_a_runs_evaluations_as_the_board_counts_them(tmp_path):
    """benchmarks/protocol_study.py over a real run's TensorBoard folder: one row per
    periodic evaluation, its numbers those of the evaluation's own metrics."""
    pytest.importorskip("tensorboard")
    from benchmark_scripts import load

    from harness.records.ranking import fits

    study = load("protocol_study")
    cfg = smoke(steps=20, every=10)
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ck.pt", notice=lambda _: None,
                                tensorboard=str(tmp_path / "tb"))  # fmt: skip
    assert result.status == "finished", result.traceback
    table = study.study(tmp_path / "tb", cfg.train.train_max)
    assert list(table["step"]) == [10, 20] and set(table["run"]) == {cfg.run_id()}
    final = table[table["step"] == 20].iloc[0]
    within = [m.exact_match for _, m in result.metrics if m.length <= cfg.train.train_max]
    assert final["EM≤N"] == pytest.approx(sum(within) / len(within))
    assert final["fits"] == fits(final["EM≤N"])  # a pandas mean (NumPy float64) is accepted


def test_bench_explains_bad_evaluation_options(tmp_path, monkeypatch):
    args = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--store", str(tmp_path / "s.sqlite")]
    result = CliRunner().invoke(main, [*args, "--eval-select", "top3"])
    assert result.exit_code == 2 and "set eval.every > 0" in result.output

    import harness.training.tblog as tblog

    def missing():
        raise RuntimeError(tblog.INSTALL_HINT)

    monkeypatch.setattr(tblog, "check_available", missing)
    result = CliRunner().invoke(main, [*args, "--tensorboard", str(tmp_path / "tb")])
    assert result.exit_code == 2 and "pip install 'pezoo[tensorboard]'" in result.output
    assert not (tmp_path / "s.sqlite").exists()  # refused before anything was written


def test_sweep_axes_include_the_evaluation_options():
    from harness.sweeps.sweep import Grid

    grid = Grid(pe=("nope",), task=("copy",), preset="smoke", eval_every=(5,), eval_select=("final", "best_in_dist"))
    assert [(c.eval.every, c.eval.select) for c in grid.configs()] == [(5, "final"), (5, "best_in_dist")]
    assert dataclasses.replace(grid, eval_start_loss=(0.5,)).configs()[0].eval.start_below_loss == 0.5
