"""Runs trained as one stacked pass (harness.training.stacked): each run's loss and gradients
are those of its own pass to float rounding, whatever stacks beside it (its random draws
included), a training run ends where it ends alone to a stated tolerance, members come and go
without a deadlock, and a stack that cannot be batched dissolves into runs alone, bit for bit.

The tolerance: a stacked pass is the plain padded pass (``harness.training.graphs``) batched
over runs, on the eager backend where vmap cannot batch the model's own; a run alone on a
CPU takes length groups on sdpa. Per pass the two agree to ~1e-6 relative (float32); over a
smoke run's 20 AdamW steps the final loss to 1e-4 relative.

CPU stands in for the GPU (no streams here; measured on one by benchmarks/device_check.py)."""

from __future__ import annotations

import dataclasses
import math
import random
import threading

import pytest
import torch

import harness.training.stacked as stacked
from harness.config import preset_config
from harness.tasks.data import IGNORE
from harness.training.accel import Accel
from harness.training.feed import make_batch
from harness.training.graphs import QUANTUM, graph_inputs, plain_loss
from harness.training.train import build_model, train, training_task

# none, a learned bias (sdpa cannot take its gradient under vmap: eager), randomized
# positions planned per length, Abacus's offset drawn per pass, a data-dependent gate
ENCODINGS = [
    ("nope", "copy"),
    ("fire", "reverse"),
    ("randomized:ape{max_length=64}", "copy"),
    ("abacus+fire", "addition"),
    ("fox", "flip_flop"),
]


def _config(pe, task, seed=0, steps=20):
    return preset_config("smoke", pe=pe, task=task, seed=seed, overrides={"train": {"steps": steps}})


@pytest.fixture
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _batch(cfg, task, seed):
    rng = random.Random(f"batch/{seed}")
    return make_batch(task, rng, None, batch_size=8, lo=1, hi=cfg.train.train_max, protocol=cfg.protocol)


def _alone(model, batch, generator):
    """The reference: the plain padded pass on this run's own planned positions and draws."""
    with model.pe.drawing_from(generator):
        inputs, with_positions = graph_inputs(model, batch, batch, QUANTUM, True)
        positions = inputs.pop() if with_positions else None
        draws = model.pe.plan_draws("cpu")
    for p in model.parameters():
        p.grad = None
    loss, _ = plain_loss(model, "fp32", type(batch)(*inputs), positions, draws)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(("pe", "task_name"), ENCODINGS)
def test_a_stacked_pass_gives_each_run_its_own_loss_and_gradients(one_torch_thread, pe, task_name):
    cfgs = [_config(pe, task_name, seed) for seed in range(3)]
    task = training_task(cfgs[0])
    models = [build_model(cfg) for cfg in cfgs]
    batches = [_batch(cfg, task, seed) for seed, cfg in enumerate(cfgs)]  # of different widths
    alone = [
        _alone(m, b, torch.Generator().manual_seed(7 + i)) for i, (m, b) in enumerate(zip(models, batches, strict=True))
    ]

    stack = stacked.Stack(models[0], "fp32")
    members = [stack.join(m) for m in models]
    out: dict[int, tuple] = {}

    def step(i):
        with models[i].pe.drawing_from(torch.Generator().manual_seed(7 + i)):
            out[i] = members[i].step(batches[i], batches[i])

    threads = [threading.Thread(target=step, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert stack.dissolved is None and stack.passes == 1 and stack.member_steps == 3 and stack.backend == "eager"
    for i, model in enumerate(models):
        loss, task_loss = out[i]
        assert task_loss.item() == loss.item()  # no regularisation: the same value
        assert loss.item() == pytest.approx(alone[i][0].item(), rel=1e-5)
        for name, grad in alone[i][1].items():
            torch.testing.assert_close(model.get_parameter(name).grad, grad, rtol=1e-4, atol=1e-6)


def test_the_pass_uses_its_own_copy_of_the_template(one_torch_thread):
    """A member that has left trains or evaluates its model while the others' pass swaps weights
    into the template: the template is the stack's own copy."""
    cfgs = [_config("nope", "copy", seed) for seed in range(2)]
    models = [build_model(cfg) for cfg in cfgs]
    stack = stacked.Stack(models[0], "fp32")
    assert stack.template is not models[0]
    assert all(
        a.data_ptr() != b.data_ptr() for a, b in zip(stack.template.parameters(), models[0].parameters(), strict=True)
    )


def test_a_member_of_another_shape_is_refused():
    stack = stacked.Stack(build_model(_config("nope", "copy")), "fp32")
    other = preset_config(
        "smoke", pe="nope", task="copy", seed=0, overrides={"backbone": {"d_model": 16}, "train": {"steps": 20}}
    )
    with pytest.raises(ValueError, match="same parameters"):
        stack.join(build_model(other))


def _train_in_threads(cfgs, stacks, *, on_step=None, accel=None):
    results: dict[int, object] = {}

    def run(i, cfg):
        with stacked.installed(stacks):
            model = build_model(cfg)
            try:
                results[i] = train(
                    cfg,
                    model,
                    training_task(cfg),
                    "cpu",
                    accel=Accel(stack=True) if accel is None else accel,
                    on_step=on_step(i) if on_step else None,
                )
            except Exception as exc:  # the test looks at it
                results[i] = exc

    threads = [threading.Thread(target=run, args=(i, cfg)) for i, cfg in enumerate(cfgs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a member is stuck"
    return results


@pytest.mark.slow
def test_runs_trained_in_a_stack_end_where_they_end_alone(one_torch_thread):
    cfgs = [_config("randomized:rope{max_length=64}", "reverse", seed) for seed in range(3)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu").final_loss for cfg in cfgs]
    stacks = stacked.Stacks()
    together = _train_in_threads(cfgs, stacks)
    (stack,) = stacks.all()
    assert stack.dissolved is None
    assert stack.member_steps == sum(cfg.train.steps for cfg in cfgs)  # every step of every run went through the stack
    # how many runs a pass took depends on when each joined (a run that builds its model first
    # steps alone until the others join): timing, not asserted here (test_a_stacked_pass_... is)
    assert stack.passes >= cfgs[0].train.steps
    for i, loss in enumerate(alone):
        assert together[i].final_loss == pytest.approx(loss, rel=1e-4)


def test_members_of_different_lengths_and_one_that_fails_leave_the_others_going(one_torch_thread):
    """A run with fewer steps leaves at its end and a run whose loop raises leaves at once:
    the others train on, in a smaller stack (no member waits for one that has gone)."""
    cfgs = [_config("nope", "copy", 0, steps=6), _config("nope", "copy", 1, steps=12), _config("nope", "copy", 2)]

    def on_step(i):
        def report(step, loss):
            if i == 2 and step == 3:
                raise RuntimeError("this run's own failure")

        return report

    stacks = stacked.Stacks()
    results = _train_in_threads(cfgs, stacks, on_step=on_step)
    assert isinstance(results[2], RuntimeError)
    assert not stacks.all()[0]._passes  # the last to leave gave the recorded passes' memory back
    assert results[0].steps == 6 and results[1].steps == 12 and math.isfinite(results[1].final_loss)
    (stack,) = stacks.all()
    assert stack.size == 0
    # each member's steps taken in the stack: 6, 12, and the failing run's 4 (steps 0-3)
    assert stack.member_steps == 6 + 12 + 4
    assert stack.passes >= 12  # the longest run's steps; how many shared a pass is timing


def test_a_stack_that_cannot_be_batched_dissolves_into_runs_alone(one_torch_thread, monkeypatch):
    """vmap refuses the pass (here: made to): a warning, and each run trains as it does alone,
    bit for bit, its random positions included (the step the stack handed back draws them
    again from where it started)."""
    cfgs = [_config("randomized:ape{max_length=64}", "copy", seed) for seed in range(2)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu").final_loss for cfg in cfgs]

    def refuse(self, models, requests, stream):
        raise RuntimeError("vmap: no batching rule here")

    monkeypatch.setattr(stacked._StackedPass, "run", refuse)
    stacks = stacked.Stacks()
    with pytest.warns(RuntimeWarning, match="each trains alone"):
        together = _train_in_threads(cfgs, stacks)
    (stack,) = stacks.all()
    assert stack.dissolved is not None and "no batching rule" in stack.dissolved
    assert [together[i].final_loss for i in range(2)] == alone


def test_no_stack_without_one_installed_or_at_fp16():
    model = build_model(_config("nope", "copy"))
    assert stacked.join(model, "fp32", True, ()) is None  # nothing installed in this thread
    with stacked.installed(stacked.Stacks()):
        assert stacked.join(model, "fp16", True, ()) is None  # its loss scaler is its own
        member = stacked.join(model, "fp32", True, ())
        assert member is not None
        member.leave()


def test_the_stack_loop_feature_is_named_and_off_by_default():
    assert not Accel.for_device("cpu").stack and not Accel.for_device("cuda").stack
    assert Accel.for_device("cpu", "stack").features() == "stack"
    assert "stack" in Accel.for_device("cuda", "graphs,stack").features()


def test_padding_widened_to_the_stack_keeps_labels_ignored():
    cfg = _config("randomized:ape{max_length=64}", "copy")
    model = build_model(cfg)
    batch = _batch(cfg, training_task(cfg), 0)
    stack = stacked.Stack(model, "fp32")
    with model.pe.drawing_from(torch.Generator().manual_seed(0)):
        request = stack._request(model, batch, batch)
    width = request.inputs[0].shape[1] + QUANTUM
    widened = stack._pass("eager")._widened(request, width)
    inputs, labels, positions = widened[0], widened[1], widened[4]
    assert inputs.shape[1] == labels.shape[1] == positions.shape[1] == width
    assert (labels[:, -QUANTUM:] == IGNORE).all()
    assert int(positions.max()) < 64  # repeated, still a valid table index


@pytest.mark.slow
def test_a_grouped_sweep_stacks_its_runs_of_one_shape(one_torch_thread, tmp_path, monkeypatch):
    """The grouped executor installs its stacks in its threads: with ``PEZOO_ACCEL=stack``
    its runs of one shape share their passes, and their records say the loop stacked."""
    from harness.execution.run import train_and_evaluate
    from harness.sweeps.executors import Grouped
    from harness.sweeps.executors.jobs import Job

    cfgs = [_config("nope", "copy", seed) for seed in range(3)]
    alone = {c.run_id(): train_and_evaluate(c, torch.device("cpu"), tmp_path / f"a{i}.pt") for i, c in enumerate(cfgs)}
    monkeypatch.setenv("PEZOO_ACCEL", "stack")
    group = Grouped(["cpu"] * 3)
    for i, cfg in enumerate(cfgs):
        group.submit(Job(i, cfg.to_dict(), cfg.run_id(), str(tmp_path / f"g{i}.pt")))
    together = {}
    while len(together) < len(cfgs):
        together |= {job.run_id: answer for job, answer in group.wait()}
    group.close()
    (stack,) = group._stacks.all()
    assert stack.dissolved is None and stack.member_steps == 3 * cfgs[0].train.steps
    for run_id, result in together.items():
        assert result.status == "finished", result.error
        assert result.final_loss == pytest.approx(alone[run_id].final_loss, rel=1e-4)
        assert "stack" in result.provenance["loop"]
        shared = int(result.provenance["stacked"].split()[0])  # "<n> of the 20 steps trained in this attempt, ..."
        assert 0 < shared <= 20 and "of the 20 steps" in result.provenance["stacked"]
        assert result.provenance["stacked"].endswith("eager attention")


def test_a_stacking_sweep_queues_runs_of_one_shape_together(tmp_path, monkeypatch):
    """The plan's order is task by task; a stacking group's queue is shape by shape, so the
    runs in flight at once can share their passes. Without stacking the plan's order stays."""
    from harness.records.store import Store
    from harness.sweeps.executors import Grouped, run_sweep
    from harness.sweeps.executors.driver import SweepEvents

    class Started(SweepEvents):
        def __init__(self):
            self.order = []

        def started(self, job):
            self.order.append(job.index)

    configs = [_config(pe, task, 0, steps=2) for task in ("copy", "reverse") for pe in ("nope", "alibi")]
    for stacking, expected in ((False, [1, 2, 3, 4]), (True, [2, 4, 1, 3])):  # alibi's shape sorts first
        if stacking:
            monkeypatch.setenv("PEZOO_ACCEL", "stack")
        events = Started()
        with Store(tmp_path / f"{stacking}.sqlite") as store:
            group = Grouped(["cpu"])
            run_sweep(group, configs, store, checkpoint_dir=tmp_path / str(stacking), events=events)
            group.close()
        assert events.order == expected


def test_the_recorded_pass_takes_each_steps_weights_through_its_own_buffers(one_torch_thread, monkeypatch):
    """The CUDA-graph path on a CPU stand-in (a "capture" that returns the function itself):
    the weights are copied into the graph's buffers each step, so a replay sees this step's
    weights whoever the members are; the members' gradients are their slices of the buffers'
    gradient; the recorded function is made once per stack size and shapes."""
    captured = []

    def stand_in(function, samples):
        captured.append(tuple(tuple(s.shape) for s in samples))
        return function

    monkeypatch.setattr(stacked, "capture", stand_in)
    monkeypatch.setattr(stacked, "CAPTURE_AFTER", 1)  # recorded at once
    cfgs = [_config("fire", "reverse", seed) for seed in range(2)]
    task = training_task(cfgs[0])
    models = [build_model(cfg) for cfg in cfgs]
    stack = stacked.Stack(models[0], "fp32", graphs=True)
    stack._pass("eager").graphs = True  # CUDA only, but for the stand-in
    members = [stack.join(m) for m in models]
    for step in range(2):
        batches = [_batch(cfg, task, 10 * step + seed) for seed, cfg in enumerate(cfgs)]
        alone = [
            _alone(m, b, torch.Generator().manual_seed(i)) for i, (m, b) in enumerate(zip(models, batches, strict=True))
        ]
        out: dict[int, tuple] = {}

        def run(i, batches=batches, out=out):
            with models[i].pe.drawing_from(torch.Generator().manual_seed(i)):
                out[i] = members[i].step(batches[i], batches[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        for i, model in enumerate(models):
            assert out[i][0].item() == pytest.approx(alone[i][0].item(), rel=1e-5)
            for name, grad in alone[i][1].items():
                torch.testing.assert_close(model.get_parameter(name).grad, grad, rtol=1e-4, atol=1e-6)
        with torch.no_grad():  # an update between the steps: the next replay must see it
            for model in models:
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
    assert stack.passes == 2 and 1 <= len(captured) <= 2  # one per width bucket met


def test_a_stack_size_met_a_few_times_only_is_not_recorded(monkeypatch):
    """Sizes met while runs start or end run eagerly: a capture at the CAPTURE_AFTER-th use."""
    captured = []
    monkeypatch.setattr(stacked, "capture", lambda function, samples: captured.append(1) or function)
    model = build_model(_config("nope", "copy"))
    pass_ = stacked._StackedPass(model, "eager", "fp32")
    pass_.graphs = True
    inputs = [torch.zeros(2, 8, 8)]
    for use in range(1, stacked.CAPTURE_AFTER + 2):
        got = pass_._graph((2, False, "shapes"), False, inputs)
        assert (got is None) == (use < stacked.CAPTURE_AFTER)
    assert captured == [1]


def test_a_mixed_precision_run_in_a_stack_ends_where_it_ends_alone(one_torch_thread):
    """A bf16 run steps with the fused AdamW, which reads a strided gradient wrong: the stack
    hands each run its gradient in the parameter's own layout (vmap's embedding gradient
    comes transposed), and the run ends where it ends alone."""
    overrides = {"train": {"steps": 20, "precision": "bf16"}}
    cfgs = [preset_config("smoke", pe="rope", task="copy", seed=seed, overrides=overrides) for seed in range(2)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu").final_loss for cfg in cfgs]
    together = _train_in_threads(cfgs, stacked.Stacks())
    for i, loss in enumerate(alone):
        assert together[i].final_loss == pytest.approx(loss, rel=1e-3)


def test_each_run_gets_its_gradient_in_its_parameters_layout(one_torch_thread):
    models = [build_model(_config("nope", "copy", seed)) for seed in range(2)]
    task = training_task(_config("nope", "copy"))
    stack = stacked.Stack(models[0], "fp32")
    members = [stack.join(m) for m in models]
    threads = [
        threading.Thread(target=m.step, args=(b, b))
        for m, b in zip(members, [_batch(_config("nope", "copy"), task, i) for i in range(2)], strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for model in models:
        for name, p in model.named_parameters():
            assert p.grad is not None and p.grad.is_contiguous() and p.grad.stride() == p.stride(), name


def test_with_the_gpu_loop_features_a_stacked_run_ends_where_its_lone_run_ends(one_torch_thread):
    """The features a CUDA run takes that a CPU can run too: batches made ahead, losses read
    back every 25 steps, the fused AdamW at fp32, exact match read off the pass."""
    gpu_like = Accel(prefetch=4, readback=25, fused=True, forced=True)
    cfgs = [_config("randomized:rope{max_length=64}", "reverse", seed, steps=30) for seed in range(3)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu", accel=gpu_like).final_loss for cfg in cfgs]
    stacks = stacked.Stacks()
    results = _train_in_threads(cfgs, stacks, accel=dataclasses.replace(gpu_like, stack=True))
    (stack,) = stacks.all()
    assert stack.dissolved is None and stack.member_steps == 90
    for i, loss in enumerate(alone):
        assert results[i].final_loss == pytest.approx(loss, rel=1e-4)


def test_a_resumed_run_stacks_beside_a_fresh_one_and_ends_where_it_ends_alone(one_torch_thread, tmp_path):
    """A run stopped at step 8 (its checkpoint at step 5) resumes in a stack beside a fresh
    run: members at different steps (their own learning rates, data and checkpoints) share
    passes, and each ends where it ends alone."""
    from harness.training.train import Checkpointing, restore

    cfgs = [_config("nope", "copy", seed) for seed in range(2)]
    alone = [train(cfg, build_model(cfg), training_task(cfg), "cpu").final_loss for cfg in cfgs]
    path = tmp_path / "a.pt"

    def stop(step, loss):
        if step == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(
            cfgs[0],
            build_model(cfgs[0]),
            training_task(cfgs[0]),
            "cpu",
            checkpointing=Checkpointing(path, 5),
            on_step=stop,
        )
    stacks = stacked.Stacks()
    results: dict[int, object] = {}

    def run(i, cfg):
        with stacked.installed(stacks):
            model, resume, problem = restore(cfg, path, "cpu") if i == 0 else (build_model(cfg), None, None)
            assert problem is None and (resume is not None) == (i == 0)
            checkpointing = Checkpointing(path, 5) if i == 0 else None
            results[i] = train(
                cfg,
                model,
                training_task(cfg),
                "cpu",
                accel=Accel(stack=True),
                resume=resume,
                checkpointing=checkpointing,
            )

    threads = [threading.Thread(target=run, args=(i, cfg)) for i, cfg in enumerate(cfgs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    (stack,) = stacks.all()
    assert stack.member_steps == 15 + 20  # the resumed run trains steps 5..19
    assert results[0].stacked[:2] == (15, 15)
    for i, loss in enumerate(alone):
        assert results[i].final_loss == pytest.approx(loss, rel=1e-4)


def test_the_eager_template_is_built_under_the_global_rng_lock():
    """Building the pass's eager-backend model draws an initialisation from torch's global
    RNG: it waits for GLOBAL_RNG (held by a run seeding and drawing its own initialisation in
    another thread) and leaves the global state as it was; drawing outside the lock shifted
    a concurrently built run's weights (a flaky grouped test: 4.71 against 5.27)."""
    from harness.config.global_rng import GLOBAL_RNG

    model = build_model(_config("nope", "copy"))
    assert model.backend != "eager"
    built = threading.Event()

    def build():
        stacked._StackedPass(model, "eager", "fp32")
        built.set()

    with GLOBAL_RNG:
        state = torch.get_rng_state()
        thread = threading.Thread(target=build)
        thread.start()
        assert not built.wait(0.5)  # waits for the lock
        assert torch.equal(torch.get_rng_state(), state)
    thread.join(timeout=60)
    assert built.is_set() and torch.equal(torch.get_rng_state(), state)


def test_a_stack_copies_its_template_under_the_global_rng_lock():
    """Copying a PRISM model rebuilds its gate network, which draws an initialisation."""
    from harness.config.global_rng import GLOBAL_RNG

    model = build_model(_config("prism", "copy"))
    made = threading.Event()

    def make():
        stacked.Stack(model, "fp32")
        made.set()

    with GLOBAL_RNG:
        state = torch.get_rng_state()
        thread = threading.Thread(target=make)
        thread.start()
        assert not made.wait(0.5)
        assert torch.equal(torch.get_rng_state(), state)
    thread.join(timeout=60)
    assert made.is_set() and torch.equal(torch.get_rng_state(), state)
