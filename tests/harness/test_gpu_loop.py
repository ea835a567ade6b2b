"""The training loop's GPU features (harness.training.feed, harness.training.accel.Accel,
harness.training.train.LossReadback, harness.training.graphs): each leaves a CPU run bit-identical,
and a diverged run is still caught.
The CUDA-graph comparison at the end runs only where there is a GPU."""

from __future__ import annotations

import functools
import math
import random
import warnings

import pytest
import torch

import harness.training.graphs as graphs
import harness.training.loss as step_loss
from harness.config import preset_config
from harness.tasks import create
from harness.tasks.data import PackedStream
from harness.training.accel import ACCEL_ENV, Accel
from harness.training.feed import BatchFeed
from harness.training.graphs import GraphedLoss, bucket_width, pad_to, padded_loss_inputs, plain_loss
from harness.training.loss import training_loss
from harness.training.train import (
    DivergedError,
    LossReadback,
    build_model,
    curriculum_max,
    train,
)


def _every_third(step):
    return step % 3 == 2


def _scales_of(cfg, step):
    return 1, curriculum_max(step, cfg)


def _feed(task, cfg, ahead, pack=0, keep=_every_third, spawn=False):
    rng = random.Random("feed-test")
    stream = PackedStream(task, rng, pack, loss="completion") if pack else None
    return BatchFeed(
        task,
        rng,
        stream,
        batch_size=4,
        protocol=cfg.protocol,
        scale_range=functools.partial(_scales_of, cfg),
        first=0,
        last=9,
        device="cpu",
        ahead=ahead,
        keep_state=keep,
        spawn=spawn,
    )


@pytest.mark.parametrize(("pack", "spawn"), [(0, False), (12, False), (0, True), (12, True)])
def test_producer_thread_feeds_the_same_batches_and_states_as_inline(pack, spawn):
    """Made ahead by a thread, or by a producer process (``spawn``), the batches and the
    data states are those made inline."""
    task = create("copy")
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0, overrides={"train": {"curriculum": ((0, 2), (4, 5))}})
    inline, ahead = list(_feed(task, cfg, 0, pack)), list(_feed(task, cfg, 3, pack, spawn=spawn))
    assert [f.step for f in ahead] == list(range(9))
    for a, b in zip(inline, ahead, strict=True):
        for name in ("inputs", "labels", "scales", "scored"):
            assert torch.equal(getattr(a.batch, name), getattr(b.batch, name))
        assert a.data_rng == b.data_rng and a.stream == b.stream
        assert (a.data_rng is not None) == (a.step % 3 == 2)  # the state only where asked
    # the state kept after step 2 is the one that makes step 3's batch
    rng = random.Random()
    rng.setstate(inline[2].data_rng)
    assert max(int(n) for n in inline[3].batch.scales.flatten()) <= 5


def test_an_error_in_the_producer_reaches_the_training_loop():
    class Broken:
        name = "broken"

        def has_scale(self, n):
            return True

        def sample(self, n, rng):
            raise RuntimeError("no examples today")

    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    with pytest.raises(RuntimeError, match="no examples today"):
        list(_feed(Broken(), cfg, ahead=2))


def test_accel_settings_per_device(monkeypatch):
    monkeypatch.delenv(ACCEL_ENV, raising=False)
    assert Accel.for_device("cpu") == Accel()
    cuda = Accel.for_device("cuda")
    assert cuda.prefetch > 0 and cuda.readback > 1 and cuda.fused and cuda.graphs
    assert Accel.for_device("cuda", "off") == Accel()
    # on CPU only what cannot change the numbers is switched on
    assert Accel.for_device("cpu", "on") == Accel(prefetch=cuda.prefetch, readback=cuda.readback)
    monkeypatch.setenv(ACCEL_ENV, "readback")
    assert Accel.for_device("cuda") == Accel(readback=cuda.readback)
    with pytest.raises(ValueError, match=r"unknown feature.*graph"):
        Accel.for_device("cpu", "graph")
    # the whole-step graph is named, never a default yet; it implies the fused AdamW; a CPU drops it
    assert not cuda.step and not Accel.for_device("cuda", "on").step
    assert Accel.for_device("cuda", "step") == Accel(fused=True, step=True)
    assert "step" in Accel.for_device("cuda", "graphs,step").features()
    assert Accel.for_device("cpu", "step") == Accel()
    with pytest.raises(ValueError, match="readback >= 1"):
        Accel(readback=0)


def _train(cfg, accel, **kw):
    seen = []
    model = build_model(cfg)
    result = train(cfg, model, create(cfg.task), on_step=lambda s, v: seen.append((s, v)), accel=accel, **kw)
    return seen, result, model


def test_batched_readback_and_producer_train_the_same_run_on_cpu():
    cfg = preset_config(
        "smoke",
        pe="rope",
        task="copy",
        seed=3,
        overrides={
            "train": {"steps": 12, "batch_size": 4},
            "eval": {"every": 4, "start_below_loss": 5.3, "samples": 4, "test_max": 6},
        },
    )
    from harness.execution.run import evaluate_all

    def periodic(model_ref):
        return lambda step: evaluate_all(cfg, model_ref[0], create(cfg.task), torch.device("cpu"), {})

    ref: list = [None]
    # the model is built inside _train; hand the evaluation its model through a holder
    seen_a, res_a, model_a = _train_with_eval(cfg, Accel(), ref, periodic)
    seen_b, res_b, model_b = _train_with_eval(cfg, Accel(prefetch=2, readback=5), ref, periodic)
    assert seen_a == seen_b and [s for s, _ in seen_a] == list(range(12))
    assert res_a.final_loss == res_b.final_loss
    assert res_a.evaluations == res_b.evaluations and len(res_a.evaluations) >= 1
    for (name, a), b in zip(model_a.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def _train_with_eval(cfg, accel, ref, periodic):
    seen = []
    model = build_model(cfg)
    ref[0] = model
    result = train(
        cfg, model, create(cfg.task), on_step=lambda s, v: seen.append((s, v)), evaluate=periodic(ref), accel=accel
    )
    return seen, result, model


def test_readback_raises_at_the_step_that_diverged():
    told = []
    losses = LossReadback(5, lambda s, v: told.append(s), None)
    for step, value in enumerate([1.0, 0.5, 0.4, math.nan, 0.3]):
        losses.add(step, torch.tensor(value), torch.tensor(value))
    with pytest.raises(DivergedError, match="loss became nan at step 3"):
        losses.flush()
    assert told == [0, 1, 2] and losses.last == pytest.approx(0.4)


def test_a_run_that_diverges_between_readbacks_is_recorded_diverged(monkeypatch, tmp_path):
    real = step_loss.loss_function

    def nan_from_step_7(model, precision, device, *, graphs=False, draws=None, padded=True):
        eager, calls = real(model, precision, device, graphs=graphs, draws=draws, padded=padded), [0]

        def loss(batch, host):
            value, task_loss = eager(batch, host)
            calls[0] += 1
            if calls[0] > 7:  # step 7 on: the task's loss is NaN, as a blown-up model's
                task_loss = task_loss * math.nan
                value = task_loss
            return value, task_loss

        return loss

    monkeypatch.setattr(step_loss, "loss_function", nan_from_step_7)
    cfg = preset_config(
        "smoke",
        pe="nope",
        task="copy",
        seed=0,
        overrides={"train": {"steps": 10, "batch_size": 4}, "eval": {"samples": 2}},
    )
    with pytest.raises(DivergedError, match="loss became nan at step 7"):
        _train(cfg, Accel(readback=5))
    from harness.execution.run import train_and_evaluate

    monkeypatch.setenv(ACCEL_ENV, "readback")
    result = train_and_evaluate(cfg, torch.device("cpu"), tmp_path / "run.pt", notice=lambda m: None)
    assert result.status == "diverged" and result.error == "loss became nan at step 7"


def test_buckets_and_padding():
    assert [bucket_width(w) for w in (1, 8, 9, 23)] == [8, 8, 16, 24]
    assert bucket_width(5, 1) == 5
    with pytest.raises(ValueError, match=">= 1"):
        bucket_width(0)
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    batch = _feed(create("copy"), cfg, 0).__iter__().__next__().batch
    padded = pad_to(batch, 16)
    s = batch.inputs.shape[1]
    assert padded.inputs.shape == (4, 16) and torch.equal(padded.inputs[:, :s], batch.inputs)
    assert bool((padded.labels[:, s:] == -100).all()) and not bool(padded.scored[:, s:].any())
    with pytest.raises(ValueError, match="cannot pad"):
        pad_to(batch, s - 1)


@pytest.mark.parametrize("pe", ["nope", "rope", "alibi", "randomized"])
def test_padding_to_the_bucket_leaves_the_loss_as_it_was(pe):
    """The graphed pass's loss (padded to the bucket, one plain pass) equals the eager
    loss (length groups, padding skipped) to 1e-5 relative, and its gradients to 1e-4:
    the tolerance a graphed run's metrics are held to against its eager run's."""
    cfg = preset_config("smoke", pe=pe, task="copy", seed=0)
    model = build_model(cfg)
    batch = _feed(create("copy"), cfg, 0).__iter__().__next__().batch
    torch.manual_seed(5)
    eager, _ = training_loss(model, batch)
    eager.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(5)
    padded, positions = padded_loss_inputs(model, batch, batch)
    assert padded.inputs.shape[1] % graphs.QUANTUM == 0
    assert (positions is None) == (pe != "randomized")
    loss, task_loss = plain_loss(model, "fp32", padded, positions)
    loss.backward()
    if pe != "randomized":  # random positions: another draw, so only the shapes agree
        torch.testing.assert_close(task_loss, eager, rtol=1e-5, atol=1e-6)
        for g, p in zip(grads, model.parameters(), strict=True):
            torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


def _static_output_graphs(module, samples, num_warmup_iters=3, allow_unused_input=False):
    """A stand-in for ``torch.cuda.make_graphed_callables`` on CPU with a real graph's
    output contract: every call's outputs live in the same static buffers (a replay writes
    them in place), the gradient still flowing to the module's parameters."""
    static: dict[int, torch.Tensor] = {}

    def into_static(i, out):
        buffer = static.setdefault(i, torch.empty_like(out))
        buffer.copy_(out.detach())
        out.data = buffer  # same autograd history, the static storage
        return out

    def graphed(*args):
        out = module(*args)
        if isinstance(out, torch.Tensor):
            return into_static(0, out)
        return tuple(into_static(i, o) for i, o in enumerate(out))

    return graphed


def test_graphed_passes_take_the_offsets_drawn_outside_them(monkeypatch):
    """GraphedLoss on Abacus: the stand-in graph refuses a host draw in its replays (a CUDA
    graph would replay one frozen offset), so the step's offset must come in as an input,
    drawn from the run's own stream; the run is then the eager loop's, step for step."""
    def drawless_graphs(module, samples, num_warmup_iters=3, allow_unused_input=False):
        graphed = _static_output_graphs(module, samples)

        def replay(*args):
            with _no_host_draws():
                return graphed(*args)

        return replay

    monkeypatch.setattr(torch.cuda, "make_graphed_callables", drawless_graphs)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: torch.set_rng_state(state))
    cfg = preset_config("smoke", pe="abacus", task="addition", seed=0, overrides={"train": {"steps": 12}})
    runs = []
    for graphed in (False, True):
        if graphed:  # what loss_function gives on CUDA with graphs on, here on CPU

            def graphed_loss(model, precision, device, graphs=False, draws=None, padded=True):
                eager = GraphedLoss(model, precision, lambda batch, host: training_loss(model, batch, precision, draws))
                return lambda batch, host: eager(batch, batch)  # the host copy: a CPU batch is its own

            monkeypatch.setattr(step_loss, "loss_function", graphed_loss)
        seen: list[float] = []
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="no CUDA graph")
            model = build_model(cfg, "cpu")
            train(cfg, model, create("addition"), "cpu", on_step=lambda s, v, seen=seen: seen.append(v),
                  accel=Accel(readback=4))  # fmt: skip
        runs.append(seen)
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]), rtol=1e-4, atol=1e-5)


def test_graphed_losses_survive_the_next_replay(monkeypatch):
    """A CUDA graph's output is a buffer its next replay overwrites, and the loop reads the
    step losses back every ``readback`` steps: each step's loss must be its own (on a GPU the
    graphed run read back 24 copies of the 25th step's loss until GraphedLoss copied them)."""
    monkeypatch.setattr(torch.cuda, "make_graphed_callables", _static_output_graphs)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device=None: torch.get_rng_state())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device=None: torch.set_rng_state(state))
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    runs = []
    for graphed in (False, True):
        if graphed:  # what loss_function gives on CUDA with graphs on, here on CPU

            def graphed_loss(model, precision, device, graphs=False, draws=None, padded=True):
                return GraphedLoss(model, precision, lambda batch, host: training_loss(model, batch, precision, draws))

            monkeypatch.setattr(step_loss, "loss_function", graphed_loss)
        seen: list[float] = []
        model = build_model(cfg, "cpu")
        train(cfg, model, create("copy"), "cpu", on_step=lambda s, v, seen=seen: seen.append(v),
              accel=Accel(readback=10))  # fmt: skip
        runs.append(seen)
    assert len(set(runs[1])) == len(runs[1]) == cfg.train.steps
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("pe", ["nope", "rope", "alibi"])
def test_graphed_run_matches_its_eager_run_on_cuda(pe):
    """A smoke run trained with CUDA graphs (and the other GPU features) against the same
    run eager: every step's loss within 1e-3 relative and the final metrics within 0.05
    (a graph's float rounding, and its padded pass, drift over the steps)."""
    from harness.execution.run import evaluate_all

    cfg = preset_config("smoke", pe=pe, task="copy", seed=0)
    device = torch.device("cuda")
    runs = []
    for accel in (Accel(), Accel.for_device(device, "on")):
        seen: list[float] = []
        model = build_model(cfg, device)
        result = train(cfg, model, create("copy"), device, on_step=lambda s, v, seen=seen: seen.append(v), accel=accel)
        metrics = evaluate_all(cfg, model, create("copy"), device, {})
        runs.append((seen, result.final_loss, metrics))
    (a, fa, ma), (b, fb, mb) = runs
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-3, atol=1e-4)
    assert math.isclose(fa, fb, rel_tol=1e-3)
    for (_, x), (_, y) in zip(ma, mb, strict=True):
        assert abs(x.exact_match - y.exact_match) <= 0.05 and abs(x.token_accuracy - y.token_accuracy) <= 0.05


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("setting", ["on", "prefetch,readback,fused,graphs,forced,step"])
@pytest.mark.parametrize("pe", ["abacus", "position_coupling"])
def test_an_offset_drawing_run_is_captured_and_matches_its_eager_run_on_cuda(pe, setting):
    """Abacus's and position coupling's offsets are drawn outside the graphed pass and handed
    in (``pe.plan_draws``): every bucket captures (a bucket left eager warns, an error here),
    graphed pass or whole step, and the run's losses are its eager run's within 1e-3."""
    import warnings

    cfg = preset_config("smoke", pe=pe, task="addition", seed=0)
    device = torch.device("cuda")
    runs = []
    for accel in (Accel(), Accel.for_device(device, setting)):
        seen: list[float] = []
        model = build_model(cfg, device)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="no (whole-step )?CUDA graph")
            train(cfg, model, create("addition"), device, on_step=lambda s, v, seen=seen: seen.append(v), accel=accel)
        runs.append(seen)
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]), rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA sync checks need a GPU")
@pytest.mark.parametrize(
    ("pe", "task"), [("randomized", "copy"), ("abacus", "addition"), ("position_coupling", "addition")]
)
def test_a_graphed_step_that_draws_waits_for_no_kernel_on_cuda(pe, task):
    """What an encoding draws (randomized positions, an offset) is drawn on the host and
    copied over each step (``pezoo.interface.to_device``): asynchronously, from pinned memory,
    so a replayed step never waits for the kernels queued before it (CUDA's sync debug mode
    raises on any synchronising call)."""
    from harness.tasks.data import collate, sample_training_batch

    cfg = preset_config("smoke", pe=pe, task=task, seed=0)
    device = torch.device("cuda")
    model = build_model(cfg, device).train()
    host = collate(sample_training_batch(create(task), random.Random(0), 8, 1, 5), cfg.protocol)
    batch = host.to(device)
    own = torch.Generator().manual_seed(0)
    graphed = GraphedLoss(model, "fp32", lambda b, h: training_loss(model, b, "fp32", own))
    with model.pe.drawing_from(own):
        graphed(batch, host)[0].backward()  # the capture (and its warm-up) may synchronise
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(3):
                graphed(batch, host)[0].backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert None not in graphed.graphs.values()  # replayed, not eager


def test_a_consumer_that_stops_early_leaves_no_producer_behind():
    """The loop raising mid-run (a diverged loss) with the producer blocked on a full queue,
    even on its end-of-stream marker: closing stops and joins it."""
    task = create("copy")
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    feed = _feed(task, cfg, ahead=1)
    items = iter(feed)
    next(items)
    import time

    time.sleep(0.3)  # the producer fills the queue and waits
    feed.close()
    assert feed._thread is None
    feed = _feed(task, cfg, ahead=1)
    with pytest.raises(RuntimeError, match="stop"):
        for fed in feed:
            if fed.step == 7:  # the producer has made step 8 and waits to hand over the end marker
                time.sleep(0.3)
                raise RuntimeError("stop")
    assert feed._thread is None


def test_a_bad_accel_setting_stops_bench_before_anything_is_written(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from harness.cli import main

    monkeypatch.setenv(ACCEL_ENV, "prefetch,grpahs")
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--store", str(store)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "PEZOO_ACCEL" in result.output and "grpahs" in result.output
    assert not store.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("pe", ["prism", "prism{paper}"])
def test_a_prism_step_is_captured_with_the_scan_kernels_on(pe):
    """PRISM's pass, its scan on the Triton kernels, recorded as CUDA graphs while a batch
    producer copies on the side (on an H200 the capture failed with
    cudaErrorStreamCaptureInvalidated in the default ``global`` capture mode, where another
    thread's CUDA call spoils a capture): every bucket gets a graph, none trains eagerly,
    and the graphed loss equals the eager one within the graphs' tolerance."""
    import warnings

    from pezoo.encodings.prism.fused_scan import scan_backend

    device = torch.device("cuda")
    cfg = preset_config("quick", pe=pe, task="copy", seed=0)
    task = create("copy")
    with scan_backend("triton"):
        model = build_model(cfg, device)
        feed = BatchFeed(
            task, random.Random("capture"), None, batch_size=cfg.train.batch_size, protocol=cfg.protocol,
            scale_range=lambda step: (1, cfg.train.train_max), first=0, last=6, device=device, ahead=4,
            keep_state=lambda step: False,
        )  # fmt: skip
        graphed = GraphedLoss(model, "fp32", lambda batch, host: training_loss(model, batch, "fp32"))
        with feed, warnings.catch_warnings():
            warnings.filterwarnings("error", message="no whole-step")  # a failed capture warns: here it fails the test
            for fed in feed:
                loss, _ = graphed(fed.batch, fed.host)
                eager, _ = training_loss(model, fed.batch, "fp32")
                torch.testing.assert_close(loss, eager, rtol=1e-4, atol=1e-5)
    assert graphed.graphs and all(g is not None for g in graphed.graphs.values())


def test_a_feed_that_cannot_go_to_a_process_is_made_in_the_thread_with_a_warning():
    task = create("copy")
    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    plain = list(_feed(task, cfg, 0))
    with pytest.warns(RuntimeWarning, match="made in a thread, not a process"):
        spawned = list(_feed(task, cfg, 2, keep=lambda step: step % 3 == 2, spawn=True))  # a lambda: no pickle
    assert all(torch.equal(a.batch.inputs, b.batch.inputs) for a, b in zip(plain, spawned, strict=True))


@pytest.mark.slow
def test_a_run_whose_examples_a_process_makes_trains_as_one_that_makes_them_inline(tmp_path):
    """The loop with its batches from a producer process (``spawn``), checkpointing on the way,
    ends with the loss and weights of the plain loop."""
    from harness.training.train import Checkpointing

    cfg = preset_config(
        "smoke", pe="randomized:ape{max_length=64}", task="copy", seed=0, overrides={"train": {"steps": 12}}
    )
    ends = []
    for accel in (Accel(), Accel(prefetch=2, spawn=True)):
        model = build_model(cfg)
        result = train(
            cfg, model, create("copy"), accel=accel, checkpointing=Checkpointing(tmp_path / f"{accel.spawn}.pt", 5)
        )
        ends.append((result.final_loss, model.state_dict()))
    (loss_a, state_a), (loss_b, state_b) = ends
    assert loss_a == loss_b and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def test_a_device_held_learning_rate_is_filled_in_place():
    """A captured update reads its rate from a tensor the graph recorded: the schedule must
    write into that tensor, never replace it (the graph would go on reading the old one)."""
    from harness.training.train import lr_factor, set_learning_rate

    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    for g in opt.param_groups:
        g["base_lr"], g["capturable"], g["lr"] = cfg.train.lr, True, torch.tensor(0.0)
    held = opt.param_groups[0]["lr"]
    set_learning_rate(opt, cfg, 3)
    assert opt.param_groups[0]["lr"] is held
    assert held.item() == pytest.approx(cfg.train.lr * lr_factor(3, cfg))
    plain = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    plain.param_groups[0]["base_lr"] = cfg.train.lr
    set_learning_rate(plain, cfg, 3)
    assert isinstance(plain.param_groups[0]["lr"], float)  # every other run: a number, as ever


def test_a_whole_step_graph_is_refused_off_cuda_and_without_the_fused_update():
    from harness.training.step_graph import GraphedStep
    from harness.training.train import make_optimizer

    cfg = preset_config("smoke", pe="nope", task="copy", seed=0)
    model = build_model(cfg)
    with pytest.raises(ValueError, match="needs a CUDA model"):
        GraphedStep(model, "fp32", make_optimizer(model, cfg), cfg.train.grad_clip)
    assert not GraphedStep.supported(torch.device("cpu"), "fp32")
    assert not GraphedStep.supported(torch.device("cuda"), "fp16")  # a loss scaler's skipped steps are the host's


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
@pytest.mark.parametrize("pe", ["nope", "rope", "randomized"])
def test_a_whole_step_graphed_run_matches_its_eager_run_on_cuda(pe, tmp_path):
    """The whole step (forward, backward, clip, fused AdamW) replayed as a graph against the
    loop's default GPU features: every step's loss within 1e-3 relative, no bucket left
    eager (a warning would say so), and a checkpoint it writes resumes (its rate a number)."""
    import warnings

    from harness.training.train import Checkpointing, restore

    cfg = preset_config("smoke", pe=pe, task="copy", seed=0)
    device = torch.device("cuda")
    runs = []
    for setting in ("on", "prefetch,readback,fused,graphs,forced,step"):
        seen: list[float] = []
        model = build_model(cfg, device)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="no whole-step")
            train(cfg, model, create("copy"), device, on_step=lambda s, v, seen=seen: seen.append(v),
                  accel=Accel.for_device(device, setting),
                  checkpointing=Checkpointing(tmp_path / f"{len(runs)}.pt", every=cfg.train.steps // 2))  # fmt: skip
        runs.append(seen)
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]), rtol=1e-3, atol=1e-4)
    _, resume, problem = restore(cfg, tmp_path / "1.pt", device)
    assert problem is None and resume is not None
    assert all(isinstance(g["lr"], float) for g in resume["optimizer"]["param_groups"])


def _no_host_draws():
    """A block in which torch's random constructors raise (what a graph's replay cannot redo)."""
    import contextlib
    from unittest import mock

    def refuse(*args, **kwargs):
        raise AssertionError("a host draw inside a replayed step: a CUDA graph would replay it frozen")

    stack = contextlib.ExitStack()
    for name in ("randint", "rand", "randn", "randperm"):
        stack.enter_context(mock.patch.object(torch, name, refuse))
    return stack


class _ReplayingStandIn:
    """A CPU stand-in for CUDA graphs (``harness.training.step_graph.Recorder``): "capturing"
    keeps the step's body without running it; a replay runs it and writes its losses into
    the static outputs, as a graph's replay writes into its own. The data flow a graph has
    (static inputs copied in, the rate read from the optimiser's tensor at each replay, the
    optimiser's state made before the capture) is then the stand-in's too. A graph's replay
    runs no host code, so a random draw the body makes on the host would be frozen into a
    real graph (or refuse its capture): the stand-in's replay refuses it."""

    def __init__(self):
        self.captures = self.replays = 0

    def warm_up(self, device):
        import contextlib

        return contextlib.nullcontext()

    def random_state(self, device):
        return torch.get_rng_state()

    def set_random_state(self, state, device):
        torch.set_rng_state(state)

    def record(self, body):
        self.captures += 1
        loss, task = torch.zeros(()), torch.zeros(())
        stand_in = self

        class Graph:
            def replay(self):
                stand_in.replays += 1
                with _no_host_draws():
                    got_loss, got_task = body()
                loss.copy_(got_loss.detach())
                task.copy_(got_task.detach())

        return Graph(), loss, task


def test_the_whole_step_graph_trains_the_eager_loops_run_with_a_cpu_stand_in(monkeypatch, tmp_path):
    """The whole-step loop's logic, where no GPU is: the first step eager (the optimiser's
    state), one capture per length bucket, every later step a replay reading the schedule's
    rate from the device-held tensor, losses equal to the eager loop's to float rounding (a
    padded pass against length groups), and a checkpoint that stores the rate as a number
    and resumes."""
    import harness.training.step_graph as sg
    import harness.training.train as tr

    stand_in = _ReplayingStandIn()
    monkeypatch.setattr(sg, "CUDA", stand_in)
    monkeypatch.setattr(sg.GraphedStep, "supported", staticmethod(lambda device, precision: True))
    fused = tr.make_optimizer
    monkeypatch.setattr(tr, "make_optimizer", lambda model, cfg, fused_=False, **kw: fused(model, cfg, fused=True))
    cfg = preset_config("smoke", pe="rope", task="copy", seed=0, overrides={"train": {"steps": 24}})

    eager_seen, _, eager_model = _train(cfg, Accel(readback=4))
    seen, _, model = _train(cfg, Accel(readback=4, fused=True, step=True),
                                 checkpointing=tr.Checkpointing(tmp_path / "ck.pt", every=12))  # fmt: skip
    # one capture per length bucket met; every step but the first (eager: the state) replayed
    assert stand_in.captures >= 1 and stand_in.replays == cfg.train.steps - 1
    torch.testing.assert_close(torch.tensor([v for _, v in seen]), torch.tensor([v for _, v in eager_seen]),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert all(isinstance(g["lr"], float) for g in state["optimizer"]["param_groups"])
    resumed_model, resume, problem = tr.restore(cfg, tmp_path / "ck.pt", "cpu")
    assert problem is None and resume["step"] == 12
    replays = stand_in.replays
    tail: list = []
    tr.train(cfg, resumed_model, create(cfg.task), on_step=lambda s, v: tail.append((s, v)), resume=resume,
             accel=Accel(readback=4, fused=True, step=True))  # fmt: skip
    assert stand_in.replays - replays == cfg.train.steps - 12  # the state came with it: no eager step
    torch.testing.assert_close(torch.tensor([v for _, v in tail]), torch.tensor([v for _, v in seen[12:]]),
                               rtol=1e-5, atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("pe", ["abacus", "position_coupling"])
def test_a_whole_step_graph_takes_the_offsets_drawn_outside_it(pe, monkeypatch):
    """Abacus and position coupling draw one offset per batch. A graph replays kernels, not
    the host's draws, so the step's offset is drawn outside the graph, from the run's own
    stream, and copied in (``pe.plan_draws``): with the stand-in refusing any draw inside a
    replay, every step after the first replays, and the run (a fresh offset each step) is the
    eager loop's, loss for loss and weight for weight."""
    import harness.training.step_graph as sg
    import harness.training.train as tr

    stand_in = _ReplayingStandIn()
    monkeypatch.setattr(sg, "CUDA", stand_in)
    monkeypatch.setattr(sg.GraphedStep, "supported", staticmethod(lambda device, precision: True))
    fused = tr.make_optimizer
    monkeypatch.setattr(tr, "make_optimizer", lambda model, cfg, fused_=False, **kw: fused(model, cfg, fused=True))
    cfg = preset_config("smoke", pe=pe, task="addition", seed=0, overrides={"train": {"steps": 12}})

    eager_seen, _, eager_model = _train(cfg, Accel(readback=4))
    seen, _, model = _train(cfg, Accel(readback=4, fused=True, step=True))
    assert stand_in.captures >= 1 and stand_in.replays == cfg.train.steps - 1
    torch.testing.assert_close(torch.tensor([v for _, v in seen]), torch.tensor([v for _, v in eager_seen]),
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    for a, b in zip(model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
