"""A run's precision (harness/training/precision.py): autocast over float32 weights, fp16 loss scaling,
evaluation in the training's precision unless asked otherwise, and run ids that change with
it except at fp32, the default."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import harness.tasks as tasks
from harness.cli import main
from harness.config import (
    GPU_PRESETS,
    LM_PRESETS,
    PRESET_DESCRIPTIONS,
    PRESETS,
    EvalConfig,
    RunConfig,
    TrainConfig,
    preset_config,
)
from harness.execution.run import evaluate_all
from harness.sweeps.sweep import Grid, SweepSpec, load_sweep
from harness.training.checkpoint import load_checkpoint, save_checkpoint
from harness.training.train import Checkpointing, build_model, restore, train

RESULTS = Path(__file__).resolve().parents[2] / "leaderboard" / "results"


def smoke(precision="fp32", steps=20, **train):
    return preset_config(
        "smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": steps, "precision": precision, **train}}
    )


def with_precision(cfg, train=None, evaluation="keep"):
    t = dataclasses.replace(cfg.train, precision=train) if train is not None else cfg.train
    e = dataclasses.replace(cfg.eval, precision=evaluation) if evaluation != "keep" else cfg.eval
    return dataclasses.replace(cfg, train=t, eval=e)


def test_every_published_run_keeps_its_id():
    """Records from before precision existed say nothing of it: they read as fp32, same id."""
    checked = 0
    for path in sorted(RESULTS.glob("*.jsonl"))[:3]:
        for line in path.read_text().splitlines()[:50]:
            record = json.loads(line)
            cfg = RunConfig.from_dict(record["config"])
            assert cfg.train.precision == "fp32" and cfg.eval.precision is None
            assert cfg.run_id() == record["run_id"]
            checked += 1
    assert checked


def test_precision_is_recorded_and_changes_the_run_id_except_where_it_means_fp32_as_before():
    base = preset_config("quick", pe="rope", task="copy", seed=0)
    ids = {p: with_precision(base, train=p).run_id() for p in ("fp32", "bf16", "fp16")}
    assert ids["fp32"] == base.run_id() and len(set(ids.values())) == 3
    bf16 = with_precision(base, train="bf16")
    assert bf16.to_dict()["train"]["precision"] == "bf16"
    assert RunConfig.from_dict(json.loads(json.dumps(bf16.to_dict()))) == bf16  # stored and read back
    # evaluated as trained, said explicitly: the same run; evaluated otherwise: another
    assert with_precision(base, evaluation="fp32").run_id() == base.run_id()
    assert with_precision(bf16, evaluation="bf16").run_id() == bf16.run_id()
    assert with_precision(bf16, evaluation="fp32").run_id() not in (bf16.run_id(), base.run_id())


def test_the_gpu_presets_train_in_bf16_and_say_so_while_the_cpu_presets_stay_fp32():
    for name in PRESETS:
        task = "reverse_string" if name == "ruoss" else "lm_en" if name in LM_PRESETS else "copy"
        cfg = preset_config(name, pe="nope", task=task, seed=0)
        assert cfg.train.precision == ("bf16" if name in GPU_PRESETS else "fp32"), name
        assert ("bf16" in PRESET_DESCRIPTIONS[name]) == (name in GPU_PRESETS)
    forced = preset_config("gpu", pe="nope", task="copy", seed=0, overrides={"train": {"precision": "fp32"}})
    assert forced.train.precision == "fp32"


@pytest.mark.parametrize(
    "build",
    [
        lambda: TrainConfig(precision="fp64"),
        lambda: TrainConfig(precision="BF16"),
        lambda: TrainConfig(precision=None),
        lambda: TrainConfig(precision=16),
        lambda: EvalConfig(precision="int8"),
        lambda: EvalConfig(precision=["bf16"]),
        lambda: RunConfig.from_dict({"pe": "nope", "task": "copy", "train": {"precision": True}}),
    ],
)
def test_an_unknown_precision_is_refused_naming_the_valid_ones(build):
    with pytest.raises(ValueError, match="precision") as err:
        build()
    assert "fp32, bf16, fp16" in str(err.value)


def test_bench_and_sweep_files_take_a_precision_and_refuse_a_wrong_one(tmp_path):
    runs = SweepSpec((Grid(preset="smoke", pe=("nope",), task=("copy",), precision=("fp32", "bf16")),)).configs()
    assert [c.train.precision for c in runs] == ["fp32", "bf16"]
    sweep = tmp_path / "s.toml"
    sweep.write_text('preset = "smoke"\npe = ["nope"]\ntask = ["copy"]\nprecision = "fp16"\neval_precision = "fp32"\n')
    (cfg,) = load_sweep(sweep).configs()
    assert (cfg.train.precision, cfg.eval.precision) == ("fp16", "fp32")
    store = tmp_path / "s.sqlite"
    bench = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--store", str(store)]
    for option in ("--precision", "--eval-precision"):
        result = CliRunner().invoke(main, [*bench, option, "fp64"])
        assert result.exit_code == 2 and option in result.output and "fp32, bf16, fp16" in result.output
        assert not store.exists()


def test_mixed_precision_runs_its_matrix_work_in_low_precision_over_float32_weights():
    task = tasks.create("copy")
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        cfg = smoke(precision, steps=3)
        model = build_model(cfg)
        seen: list[torch.dtype] = []
        model.blocks[0].attn.qkv.register_forward_hook(lambda m, i, out, seen=seen: seen.append(out.dtype))
        result = train(cfg, model, task)
        assert set(seen) == {dtype} and torch.isfinite(torch.tensor(result.final_loss))
        assert {p.dtype for p in model.parameters()} == {torch.float32}  # master weights stay float32


def test_evaluation_runs_in_the_training_precision_unless_told_otherwise(monkeypatch):
    import harness.execution.run as run

    seen = []

    def spy(model, examples, **kw):
        seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32)
        return real(model, examples, **kw)

    real = run.evaluate_length
    monkeypatch.setattr(run, "evaluate_length", spy)
    task = tasks.create("copy")
    for cfg, dtype in (
        (smoke("bf16"), torch.bfloat16),
        (with_precision(smoke("bf16"), evaluation="fp32"), torch.float32),
        (with_precision(smoke("fp32"), evaluation="fp16"), torch.float16),
        (smoke("fp32"), torch.float32),
    ):
        seen.clear()
        evaluate_all(cfg, build_model(cfg), task, torch.device("cpu"), {})
        assert seen and set(seen) == {dtype}


def test_an_fp16_run_resumes_with_its_loss_scale_and_ends_as_an_uninterrupted_one(tmp_path):
    cfg = smoke("fp16", steps=12)
    task = tasks.create("copy")
    reference = build_model(cfg)
    ref = train(cfg, reference, task)
    path = tmp_path / "ck.pt"
    train(dataclasses.replace(cfg), build_model(cfg), task, checkpointing=Checkpointing(path, every=6))
    saved = load_checkpoint(path, cfg.run_id())
    assert saved["step"] == 6 and saved["scaler"]["scale"] > 0
    model, resume, problem = restore(cfg, path, "cpu")
    assert problem is None and resume is not None
    resumed = train(cfg, model, task, resume=resume)
    assert resumed.final_loss == ref.final_loss
    for a, b in zip(model.state_dict().values(), reference.state_dict().values(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "scaler",
    [None, {"scale": -1.0, "growth_tracker": 0}, {"scale": float("nan"), "growth_tracker": 0}, {"scale": 1.0}, "x"],
)
def test_an_fp16_checkpoint_without_a_usable_loss_scale_is_set_aside(tmp_path, scaler):
    cfg = smoke("fp16", steps=8)
    path = tmp_path / "ck.pt"
    train(cfg, build_model(cfg), tasks.create("copy"), checkpointing=Checkpointing(path, every=4))
    payload = load_checkpoint(path, cfg.run_id())
    if scaler is None:
        del payload["scaler"]
    else:
        payload["scaler"] = scaler
    save_checkpoint(path, payload)
    _, resume, problem = restore(cfg, path, "cpu")
    assert resume is None and "scaler" in problem and "starts over" in problem


LEARNING = [e for e in __import__("pezoo").available() if ":" not in e] + [
    "randomized:rope",  # bare randomized wraps ape: its relative draws too
    "ssmax:alibi",  # bare ssmax wraps rope: its scaling on a bias too, and on none (Llama 4's NoPE layers)
    "ssmax:nope",
    "dape:nope",  # bare dape wraps kerple_log: its MLP with no bias to read too
]
"""Every encoding, and each wrapper over a rotation, a bias and nothing: a wrapper's own
arithmetic is the same over every inner encoding of a kind (the conformance kit and the compile
tests still take every registered composition). With all 69 names this test took 171 s on a
two-core machine with a sweep beside it; with these 30 it takes 40 s."""
SMALL = {"prism": "prism{gru_hidden=16,d_pe=8}"}  # the same code paths, a fraction of the scan's cost


@pytest.mark.slow
@pytest.mark.parametrize("pe", LEARNING)
def test_every_encoding_learns_copy_in_bf16_as_in_fp32(pe):
    """40 steps of batch 8 of a d32 one-layer model on copy to length 4: bf16 ends within 0.05
    of fp32's loss, and fp32 well below the untrained ln 64 ≈ 4.16 (1.94-2.19 measured for
    every encoding, bf16 within 0.002 of it; 80 steps told no more and took twice as long)."""
    losses = {}
    for precision in ("fp32", "bf16"):
        cfg = preset_config(
            "smoke",
            pe=SMALL.get(pe, pe),
            task="copy",
            seed=0,
            overrides={
                "train": {
                    "steps": 40,
                    "batch_size": 8,
                    "train_max": 4,
                    "warmup": 10,
                    "lr": 3e-3,
                    "precision": precision,
                },
                "eval": {"test_max": 6},
            },
        )
        losses[precision] = train(cfg, build_model(cfg), tasks.create("copy")).final_loss
    assert losses["fp32"] < 3.0
    assert abs(losses["bf16"] - losses["fp32"]) <= 0.05, losses


def test_tf32_is_switched_on_for_cuda_devices_only():
    from harness.training.precision import use_tf32

    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        assert use_tf32("cpu") is False and torch.backends.cuda.matmul.allow_tf32 is False
        assert use_tf32(torch.device("cuda", 0)) is True
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.mark.parametrize(("preset", "task"), [("gpu", "copy"), ("ruoss", "reverse_string")])
def test_a_gpu_preset_runs_its_bf16_default_end_to_end_on_the_cpu(tmp_path, preset, task):
    """The code a GPU runs by default (autocast bf16, fused optimiser, evaluation in bf16),
    through CPU autocast, at a toy size."""
    from harness.execution.run import train_and_evaluate

    cfg = preset_config(
        preset,
        pe="alibi",
        task=task,
        seed=0,
        overrides={
            "backbone": {"d_model": 32, "n_layers": 1, "n_heads": 2},
            "train": {"steps": 3, "batch_size": 4, "train_max": 3, "warmup": 1},
            "eval": {"test_max": 5, "test_stride": 1, "samples": 2, "batch_size": 2},
        },
    )
    assert cfg.train.precision == "bf16"
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "ck.pt", notice=lambda _: None)
    assert result.status == "finished", result.traceback
    assert [m.length for _, m in result.metrics] == [1, 2, 3, 4, 5]


def test_a_bf16_run_is_not_estimated_from_fp32_runs_of_the_same_model(tmp_path):
    """A precision changes the cost of a step: a plan estimates a bf16 run from bf16 runs only."""
    from harness.records.store import Store
    from harness.sweeps.plan import make_plan
    from tests.harness.test_sweep import finish

    fp32, bf16 = smoke("fp32"), smoke("bf16")
    bf16_alibi = dataclasses.replace(bf16, pe="alibi", pe_options={})
    with Store(tmp_path / "s.sqlite") as store:
        finish(store, fp32, train_seconds=2.0)
        rows = store.runs()
        (run,) = make_plan([bf16], rows, device_type="cpu").runs
        assert run.estimate is None or run.estimate.steps_per_second != 10.0  # not fp32's 20 steps in 2 s
        finish(store, bf16_alibi, train_seconds=1.0)
        (run,) = make_plan([bf16], store.runs(), device_type="cpu").runs
        assert run.estimate is not None and run.estimate.steps_per_second == 20.0  # the bf16 run's 20 steps in 1 s


@pytest.mark.parametrize("pe", LEARNING)
def test_every_encoding_takes_fp16_steps_with_loss_scaling(pe):
    cfg = preset_config(
        "smoke", pe=SMALL.get(pe, pe), task="copy", seed=0, overrides={"train": {"steps": 3, "precision": "fp16"}}
    )
    model = build_model(cfg)
    result = train(cfg, model, tasks.create("copy"))
    assert torch.isfinite(torch.tensor(result.final_loss))
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in model.parameters())


def test_tables_show_a_run_not_in_fp32_as_a_row_of_its_own(tmp_path):
    from harness.records.frames import load
    from harness.records.store import Store
    from tests.harness.test_sweep import finish

    runs = [smoke("fp32"), smoke("bf16"), with_precision(smoke("fp32"), evaluation="fp16")]
    with Store(tmp_path / "s.sqlite") as store:
        for cfg in runs:
            finish(store, cfg, train_seconds=1.0)
    labels = load(tmp_path / "s.sqlite").groupby("run_id")["pe_label"].first()
    assert [labels[c.run_id()] for c in runs] == ["rope", "rope [bf16]", "rope [fp32, eval fp16]"]


def test_tables_show_a_run_with_an_untied_output_layer_as_a_row_of_its_own(tmp_path):
    """Two models of one encoding, task and seed are two rows, not one row of two pooled runs."""
    from dataclasses import replace

    from harness.records.frames import load
    from harness.records.store import Store
    from tests.harness.test_sweep import finish

    tied = smoke("fp32")
    untied = replace(tied, backbone=replace(tied.backbone, head="untied"))
    with Store(tmp_path / "s.sqlite") as store:
        for cfg in (tied, untied):
            finish(store, cfg, train_seconds=1.0)
    labels = load(tmp_path / "s.sqlite").groupby("run_id")["pe_label"].first()
    assert [labels[c.run_id()] for c in (tied, untied)] == ["rope", "rope [untied head]"]
