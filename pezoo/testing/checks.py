"""The conformance checks (:data:`CHECKS`) and :func:`check_encoding`, which runs them.

Each check builds the kit model around the encoding (``kit.py``) or calls its hooks on
plain tensors, and raises :class:`~pezoo.testing.kit.ConformanceError` naming itself and
what differed. What each check asserts is listed in :mod:`pezoo.testing`.

Axis letters: b batch, s sequence, d model width, h heads, e head dim, v vocab.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import fields
from typing import Any

import torch
from torch import Tensor, nn

from pezoo.backends import flex_compile
from pezoo.registry import ModelDims
from pezoo.testing.hooks import check_hook_shapes
from pezoo.testing.kit import (
    ConformanceError,
    Factory,
    KitConfig,
    KitModel,
    build_model,
    fail,
    finite,
    quiet_flex_warnings,
    random_tokens,
    scale_hints,
    usable_backends,
)


def _close(check: str, what: str, got: Tensor, want: Tensor, atol: float, rtol: float = 1e-4) -> None:
    if got.shape != want.shape:
        fail(check, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}")
    if not torch.allclose(got, want, atol=atol, rtol=rtol):
        err = (got - want).abs().max().item()
        fail(check, f"{what}: max abs difference {err:.3g} exceeds atol={atol:g}, rtol={rtol:g}")


def _seeded(seed: int, model: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``model(*args, **kwargs)`` from the global RNG state ``seed``, leaving the caller's alone."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return model(*args, **kwargs)


def check_no_future_leakage(factory: Factory, cfg: KitConfig) -> None:
    """Outputs before t do not depend on tokens at t or later (train and eval mode)."""
    name = "no_future_leakage"
    s, b = cfg.length, cfg.batch
    cut = s // 2
    for mode in ("train", "eval"):
        model = build_model(factory, cfg, cfg.seed)
        model.train(mode == "train")
        pos = model.pe.positions(b, s, cfg.device)
        tokens = random_tokens(cfg, s)
        changed = tokens.clone()
        changed[:, cut:] = (changed[:, cut:] + 1 + random_tokens(cfg, s - cut, seed=1) % (cfg.vocab - 1)) % cfg.vocab
        hint = scale_hints(cfg, b, s)
        with torch.no_grad():  # equal RNG states: training-time draws (Abacus's offset) are not the future
            a = _seeded(cfg.seed + 1, model, tokens, pos, scale_hint=hint)
            c = _seeded(cfg.seed + 1, model, changed, pos, scale_hint=hint)
        if not torch.allclose(a[:, :cut], c[:, :cut], atol=cfg.atol, rtol=0):
            err = (a[:, :cut] - c[:, :cut]).abs().max().item()
            fail(name, f"changing tokens {cut}.. changed outputs before {cut} by {err:.3g} ({mode} mode)")


def check_backend_agreement(factory: Factory, cfg: KitConfig) -> None:
    """Every usable backend equals eager in fp32: forward (with key padding) and gradients."""
    name = "backend_agreement"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    runs = usable_backends(cfg.device, model.pe)  # the backends this encoding runs on
    backends = [n for n in (cfg.backends or runs) if n != "eager" and n in runs]
    b = cfg.batch
    for s, padded in ((cfg.length, False), (3 * cfg.length, True)):
        pos = model.pe.positions(b, s, cfg.device)
        tokens = random_tokens(cfg, s, seed=s)
        live = torch.ones(b, s, dtype=torch.bool, device=cfg.device)
        if padded:
            live[-1, s - s // 4 :] = False  # right padding: real queries always see real keys
        mask = live if padded else None
        hint = scale_hints(cfg, b, s)
        with torch.no_grad():
            model.set_backend("eager")
            want = model(tokens, pos, key_padding_mask=mask, scale_hint=hint)
            for backend in backends:
                model.set_backend(backend)
                with quiet_flex_warnings():
                    got = model(tokens, pos, key_padding_mask=mask, scale_hint=hint)
                what = f"{backend} vs eager forward at length {s}" + (" with key padding" if padded else "")
                _close(name, what, got[live], want[live], cfg.atol)
    # gradients of every parameter (encoding and model), at the longer length
    s = 3 * cfg.length
    pos = model.pe.positions(b, s, cfg.device)
    tokens, hint = random_tokens(cfg, s, seed=7), scale_hints(cfg, b, s)
    weights = torch.randn(b, s, cfg.vocab, generator=torch.Generator().manual_seed(cfg.seed)).to(cfg.device)

    def grads(backend: str) -> dict[str, Tensor]:
        model.set_backend(backend)
        model.zero_grad(set_to_none=True)
        with quiet_flex_warnings():
            (model(tokens, pos, scale_hint=hint) * weights).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    want = grads("eager")
    for backend in backends:
        got = grads(backend)
        if set(got) != set(want):
            fail(name, f"{backend} gives gradients for {sorted(set(got) ^ set(want))} where eager does not, or v.v.")
        for param, g in want.items():
            _close(name, f"{backend} vs eager gradient of {param}", got[param], g, cfg.atol * 10, rtol=1e-3)
    model.set_backend("eager")


def check_incremental_decoding(factory: Factory, cfg: KitConfig) -> None:
    """A prompt, then one token per call with a persistent state, equals one full pass."""
    name = "incremental_decoding"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    b, s = cfg.batch, cfg.length
    pos = model.pe.positions(b, s, cfg.device)  # planned once, like start_state
    tokens, hint = random_tokens(cfg, s), scale_hints(cfg, b, s)
    prompt = max(1, s // 3)
    for backend in _runs_on(model, ("eager", "sdpa")):
        model.set_backend(backend)
        with torch.no_grad():
            full = model(tokens, pos, scale_hint=hint)
            state: dict[str, Any] = {}
            steps = [model(tokens[:, :prompt], pos, state=state, scale_hint=hint)]
            for t in range(prompt, s):
                steps.append(model(tokens[:, t : t + 1], pos, state=state, scale_hint=hint))
        _close(name, f"token-by-token ({backend}) vs full forward", torch.cat(steps, dim=1), full, cfg.atol)
    model.set_backend("eager")


def _runs_on(model: KitModel, backends: Sequence[str]) -> list[str]:
    """Those of ``backends`` the model's encoding runs on (:meth:`~pezoo.PositionalEncoding.attention_backends`)."""
    takes = model.pe.attention_backends()
    return [b for b in backends if takes is None or b in takes]


def check_unsupported_backends(factory: Factory, cfg: KitConfig) -> None:
    """An encoding that runs on some backends only (its score transform or normaliser) is
    refused by every other usable backend with a ValueError naming the ones it runs on, never
    run through a softmax it does not use; and ``auto`` runs it."""
    name = "unsupported_backends"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    takes = model.pe.attention_backends()
    if takes is None:
        return
    if not takes:
        fail(name, "attention_backends() names no backend: the encoding could run nowhere")
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    for backend in usable_backends(cfg.device):
        if backend in takes or backend == "auto":
            continue
        model.set_backend(backend)
        try:
            with torch.no_grad(), quiet_flex_warnings():
                model(tokens, pos, scale_hint=hint)
        except ValueError as exc:
            missing = [t for t in takes if t not in str(exc)]
            if missing:
                fail(name, f"the {backend} backend's refusal does not name {', '.join(missing)}: {exc}")
            continue
        fail(name, f"the {backend} backend ran an encoding that declares it runs on {', '.join(takes)} only")
    model.set_backend("auto")
    with torch.no_grad():
        out = model(tokens, pos, scale_hint=hint)
    finite(name, "the auto backend's output", out)
    model.set_backend("eager")


def check_state_dict_round_trip(factory: Factory, cfg: KitConfig) -> None:
    """A second instance (another seed) loaded with the first's state dict computes the same."""
    name = "state_dict_round_trip"
    first, second = build_model(factory, cfg, cfg.seed), build_model(factory, cfg, cfg.seed + 1)
    buffer = io.BytesIO()
    torch.save(first.pe.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    if set(state) != set(second.pe.state_dict()):
        fail(name, f"state dict keys differ between two instances: {sorted(set(state) ^ set(second.pe.state_dict()))}")
    second.pe.load_state_dict(state, strict=True)
    first.eval(), second.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = first.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        _close(
            name,
            "outputs after load_state_dict",
            second(tokens, pos, scale_hint=hint),
            first(tokens, pos, scale_hint=hint),
            0.0,
            0.0,
        )


LOW_PRECISION_TOLERANCE = {torch.float16: 0.05, torch.bfloat16: 0.25, torch.float64: 1e-4}
"""Largest difference from the fp32 model's outputs allowed after a dtype move, relative
to the largest fp32 output (loose for fp16 / bf16: it catches garbage, not rounding)."""


def _check_moved(name: str, factory: Factory, cfg: KitConfig, dtypes: Sequence[torch.dtype]) -> None:
    """The model moved to each of ``dtypes`` (eager and sdpa): that dtype out, finite, close to fp32."""
    s, b = cfg.length, cfg.batch
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)
    scale = want.abs().max().item()
    for dtype in dtypes:
        moved = build_model(factory, cfg, cfg.seed).to(dtype)  # a fresh copy: .to() moves in place
        moved.eval()
        for backend in _runs_on(moved, ("eager", "sdpa")):
            moved.set_backend(backend)
            with torch.no_grad():
                out = moved(tokens, pos, scale_hint=hint)
            if out.dtype != dtype:
                fail(name, f"{dtype} model returned {out.dtype} ({backend})")
            finite(name, f"{dtype} forward ({backend})", out)
            err = (out.to(torch.float32) - want).abs().max().item()
            if err > LOW_PRECISION_TOLERANCE[dtype] * scale:
                fail(
                    name,
                    f"{dtype} forward ({backend}) differs from fp32 by {err:.3g} "
                    f"(> {LOW_PRECISION_TOLERANCE[dtype]:g} x the largest output {scale:.3g})",
                )


def check_half_precision(factory: Factory, cfg: KitConfig) -> None:
    """``.bfloat16()`` / ``.half()`` models (eager and sdpa): that dtype out, finite, close to fp32."""
    _check_moved("half_precision", factory, cfg, (torch.bfloat16, torch.float16))


def check_float64(factory: Factory, cfg: KitConfig) -> None:
    """A ``.double()`` model returns float64 outputs equal to fp32's up to fp32 rounding."""
    _check_moved("float64", factory, cfg, (torch.float64,))


def check_copy_and_pickle(factory: Factory, cfg: KitConfig) -> None:
    """``copy.deepcopy`` and ``pickle.loads(pickle.dumps(...))`` of the model compute the same outputs."""
    name = "copy_and_pickle"
    s, b = cfg.length, cfg.batch
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)
    for how, clone in (("deepcopy", copy.deepcopy), ("pickle", lambda m: pickle.loads(pickle.dumps(m)))):
        try:
            other = clone(model)
        except Exception as exc:
            fail(name, f"{how} of the model failed: {type(exc).__name__}: {exc}")
        with torch.no_grad():
            got = other(tokens, pos, scale_hint=hint)
        _close(name, f"outputs after {how}", got, want, 0.0, 0.0)


def check_deterministic(factory: Factory, cfg: KitConfig) -> None:
    """Same seed, same everything: bit-identical outputs in training mode (positions included);
    in eval mode, the same outputs whatever the global RNG state, under ``seeded`` where the
    encoding says its evaluation draws at random (``random_at_eval``)."""
    name = "deterministic"
    s, b = cfg.length, cfg.batch

    def run() -> Tensor:
        model = build_model(factory, cfg, cfg.seed)
        model.train()
        torch.manual_seed(cfg.seed + 1)
        pos = model.pe.positions(b, s, cfg.device)
        with torch.no_grad():
            return model(random_tokens(cfg, s), pos, scale_hint=scale_hints(cfg, b, s))

    _close(name, "two runs under the same seed", run(), run(), 0.0, 0.0)

    def evaluate(global_seed: int) -> tuple[Tensor, Tensor, bool]:
        """Positions and outputs of an eval-mode pass from global RNG state ``global_seed``, under
        ``seeded`` where the encoding draws at evaluation (``random_at_eval``); and whether it does."""
        model = build_model(factory, cfg, cfg.seed)
        model.eval()
        pe, tokens, hint = model.pe, random_tokens(cfg, s), scale_hints(cfg, b, s)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(global_seed)
            if not pe.random_at_eval:
                pos = pe.positions(b, s, cfg.device)
                return pos, model(tokens, pos, scale_hint=hint), False
            with pe.seeded(cfg.seed):
                pos = pe.positions(b, s, cfg.device)
                return pos, model(tokens, pos, scale_hint=hint), True

    (pos, out, random_at_eval), (pos2, out2, _) = evaluate(cfg.seed + 2), evaluate(cfg.seed + 3)
    if pos.shape == pos2.shape and torch.equal(pos, pos2) and torch.equal(out, out2):
        return
    if random_at_eval:
        fail(name, f"eval-mode positions or outputs under seeded({cfg.seed}) differ between two global RNG states")
    fail(
        name,
        "eval-mode positions or outputs differ between two global RNG states, but random_at_eval is False: an "
        "encoding whose evaluation draws at random says so (random_at_eval) and draws under seeded(seed)",
    )


def check_extrapolation(factory: Factory, cfg: KitConfig) -> None:
    """A forward pass at ``extrapolation_factor`` × length runs and stays finite."""
    name = "extrapolation"
    s = cfg.extrapolation_factor * cfg.length
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    pos = model.pe.positions(1, s, cfg.device)
    with torch.no_grad():
        out = model(random_tokens(cfg, s, batch=1), pos, scale_hint=scale_hints(cfg, 1, s))
    if out.shape != (1, s, cfg.vocab):
        fail(name, f"output {tuple(out.shape)} at length {s}")
    finite(name, f"output at length {s}", out)


def check_empty_inputs(factory: Factory, cfg: KitConfig) -> None:
    """No tokens, or no sequences: an empty output of the right shape, in training and
    evaluation mode (PRISM's GRU, xPos's reduction and learned PRF's scale hints raised)."""
    name = "empty_inputs"
    model = build_model(factory, cfg, cfg.seed)
    for train in (True, False):
        model.train(train)
        for b, s in ((cfg.batch, 0), (0, cfg.length)):
            pos = model.pe.positions(b, s, cfg.device)
            with torch.no_grad():
                out = model(random_tokens(cfg, s, batch=b), pos, scale_hint=scale_hints(cfg, b, s))
            if out.shape != (b, s, cfg.vocab):
                fail(name, f"output {tuple(out.shape)} for {b} sequences of {s} tokens, not {(b, s, cfg.vocab)}")


def check_gradients_finite(factory: Factory, cfg: KitConfig) -> None:
    """A training-mode backward pass gives finite gradients for the encoding's parameters."""
    name = "gradients_finite"
    model = build_model(factory, cfg, cfg.seed)
    model.train()
    s, b = cfg.length, cfg.batch
    tokens = random_tokens(cfg, s)
    logits = model(tokens, model.pe.positions(b, s, cfg.device), scale_hint=scale_hints(cfg, b, s))
    nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    for param_name, p in model.pe.named_parameters():
        if p.grad is not None:
            finite(name, f"gradient of {param_name}", p.grad)


def _stray_tensors(module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """Tensors a module keeps as plain attributes (also inside lists, tuples and dicts)."""
    for attr, value in vars(module).items():
        if attr in ("_parameters", "_buffers", "_modules"):
            continue
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, Tensor):
                yield attr, item


def check_device_move(factory: Factory, cfg: KitConfig) -> None:
    """``.to(device)`` moves everything: checked by moving to the meta device (no GPU needed)."""
    name = "device_move"
    model = build_model(factory, cfg, cfg.seed)
    model.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = model.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = model(tokens, pos, scale_hint=hint)  # also fills any lazily built cache
    for module_name, module in model.named_modules():
        if type(module).__module__.startswith("torch."):
            continue  # torch's own modules (nn.GRU's _flat_weights follow its parameters in _apply)
        for attr, tensor in _stray_tensors(module):
            fail(
                name,
                f"{module_name or 'model'}.{attr} is a {tuple(tensor.shape)} tensor outside parameters and buffers: "
                "`.to(device)` leaves it behind (register it as a buffer, persistent=False for derived tables)",
            )
    moved = copy.deepcopy(model).to("meta")
    left = [n for n, t in [*moved.named_parameters(), *moved.named_buffers()] if t.device.type != "meta"]
    if left:
        fail(name, f"after .to('meta') still off the meta device: {', '.join(left)}")
    with torch.no_grad():
        got = model(tokens, pos, scale_hint=hint)
    _close(name, "outputs of the model after a copy of it moved", got, want, 0.0, 0.0)


def check_meta_init(factory: Factory, cfg: KitConfig) -> None:
    """PyTorch's deferred initialisation: built on the meta device, materialised with
    ``to_empty``, every module's ``reset_parameters()`` called, then a state dict loaded,
    the model computes what the original does.

    Buffers registered with ``persistent=False`` (tables derived from the constructor's
    arguments) are not in the state dict, so ``reset_parameters`` is what must rebuild
    them: after ``to_empty`` they hold uninitialised memory.
    """
    name = "meta_init"
    reference = build_model(factory, cfg, cfg.seed)
    reference.eval()
    torch.manual_seed(cfg.seed)
    with torch.device("meta"):
        pe = factory()
        model = KitModel(pe, cfg.dims, cfg.vocab)
    model.to_empty(device=cfg.device)
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
    model.load_state_dict(reference.state_dict(), strict=True)
    model.eval()
    s, b = cfg.length, cfg.batch
    pos, tokens, hint = reference.pe.positions(b, s, cfg.device), random_tokens(cfg, s), scale_hints(cfg, b, s)
    with torch.no_grad():
        want = reference(tokens, pos, scale_hint=hint)
        got = model(tokens, pos, scale_hint=hint)
    what = "outputs of the meta-built model after to_empty, reset_parameters and load_state_dict"
    _close(name, what, got, want, 0.0, 0.0)


CHECKS: dict[str, Callable[[Factory, KitConfig], None]] = {
    "hook_shapes": check_hook_shapes,
    "no_future_leakage": check_no_future_leakage,
    "backend_agreement": check_backend_agreement,
    "incremental_decoding": check_incremental_decoding,
    "unsupported_backends": check_unsupported_backends,
    "state_dict_round_trip": check_state_dict_round_trip,
    "half_precision": check_half_precision,
    "float64": check_float64,
    "copy_and_pickle": check_copy_and_pickle,
    "device_move": check_device_move,
    "meta_init": check_meta_init,
    "deterministic": check_deterministic,
    "extrapolation": check_extrapolation,
    "gradients_finite": check_gradients_finite,
    "empty_inputs": check_empty_inputs,
}


def check_encoding(
    factory: Factory, dims: ModelDims | None = None, *, checks: Sequence[str] | None = None, **config: Any
) -> None:
    """Run the conformance battery on the encoding ``factory`` builds; raise on the first failure.

    Args:
        factory: ``() -> PositionalEncoding``, called several times (under fixed seeds).
        dims: the model shape the factory builds for (default ``KitConfig.dims``).
        checks: names of ``CHECKS`` to run (default: all).
        **config: other :class:`KitConfig` fields (``length``, ``backends``, ``device``, ...).

    Raises:
        ConformanceError (an AssertionError) naming the check and the difference, also
        when the encoding raised inside a check (the original exception is its cause);
        TypeError for unknown config keys or check names, a factory that is an encoding
        (or anything not callable) rather than a function building one, and ``dims`` that
        are no :class:`~pezoo.ModelDims`.
    """
    if isinstance(factory, nn.Module) or not callable(factory):
        raise TypeError(
            f"check_encoding takes a factory, a function that builds the encoding (lambda: pezoo.create(...)), "
            f"got {type(factory).__name__}: every check builds fresh instances"
        )
    if dims is not None and not isinstance(dims, ModelDims):
        raise TypeError(f"dims must be a pezoo.ModelDims, got {type(dims).__name__} {dims!r}"[:300])
    if isinstance(checks, str):
        raise TypeError(f"checks takes a list of check names, e.g. checks=[{checks!r}], not a string")
    valid = {f.name for f in fields(KitConfig)} - {"dims"}
    unknown = sorted(set(config) - valid)
    if unknown:
        raise TypeError(f"check_encoding got unknown option(s) {', '.join(unknown)}; valid: {', '.join(sorted(valid))}")
    cfg = KitConfig(**config) if dims is None else KitConfig(dims=dims, **config)
    names = list(CHECKS) if checks is None else list(checks)
    bad = sorted(set(names) - set(CHECKS))
    if bad:
        raise TypeError(f"unknown check(s) {', '.join(bad)}; valid: {', '.join(CHECKS)}")
    with flex_compile(cfg.compile_flex):
        for check in names:
            try:
                CHECKS[check](factory, cfg)
            except ConformanceError:
                raise
            except Exception as exc:  # an encoding that crashes fails the check it crashed in
                raise ConformanceError(f"[{check}] raised {type(exc).__name__}: {exc}") from exc
