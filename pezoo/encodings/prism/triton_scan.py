"""PRISM's windowed scan as two Triton kernels: the whole loop over the tokens in one launch
forward and one backward (the plan of Lee 2025's own code), for CUDA tensors.

Axis letters: t steps (new tokens), b batch, n scanned cursors, r = b·n rows, k copying
cursors (the first k of n), j copyable tokens so far, p = 2P+1 bins of the full support,
f stream width.

It computes what ``fused_scan.fused_windowed_scan`` computes (the same per-step formulas,
Alg. 1 steps 1–5, docstring of ``fused_scan``), laid out for a GPU:

* **One program per cursor row** (b, n) holds its histogram over the full support (2P+1
  bins, a power-of-two block) and runs every step of the call in a loop: the banded move
  with the edge clamp, the reset, the copy mix, ε on the reachable window |o| ≤ w' =
  min(start + t + 1, P) only, the sharpening softmax. Bins outside the window are exactly
  zero, as in the windowed scan, whose window this is, so the clamp at the support's
  edges adds exact zeros until the window reaches P. The ±1 shifts of the move read the
  previous histogram back from global memory (each step's histogram is stored anyway)
  after a barrier.
* **The streams** ``out_t = y_t @ table`` are not computed per step: after the kernel,
  the steps are grouped by window radius (powers of two, at least 16 bins each side) and
  each group is one matrix product over its bins of the table, a few cuBLAS calls in all.
  The backward's ``g_y = g_out @ tableᵀ`` is the same few products.
* **The reverse scan** recomputes each step's move, copy mix and logarithm from the stored
  histograms instead of keeping them (the forward keeps only the histograms), then applies
  the hand-written derivatives of ``fused_scan`` (softmax, γ, copy, reset, the move's
  transpose with the clamp); the ±1 shifts of g_m go through a per-row scratch row.
* **The copy branch** enters as the copy attention's probabilities (t, b, k, j + 1), as in
  ``fused_scan``: before the kernel they are mapped once to the mass per offset 1..P of
  every step (token i on offset i + 1; tokens beyond the window dropped, beyond P − 1 piled
  on the top bin, ``histogram.clamp_copy``) and the gradient is mapped back after it, into one
  dense buffer laid out like the probabilities.

The kernels are compiled by Triton for CUDA tensors; for CPU tensors they run in Triton's
interpreter (numpy), which is how the tests check them without a GPU (slow: for tests
only). ``triton`` is an optional dependency; this module imports without it and
``available()`` says whether the kernels can run.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from pezoo.encodings.prism.histogram import clamp_copy

try:  # optional: pezoo needs only torch and einops
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised where triton is absent
    triton = None
    tl = None

# The reductions' combine functions, named as tl.sum and tl.max use them: Triton's interpreter
# recognises these two by identity and reduces with numpy. tl.sum / tl.max themselves are
# jitted helpers that the interpreter can call only when TRITON_INTERPRET=1 was set before
# triton was imported (torch imports triton early); tl.reduce with these runs either way.
_SUM = None if tl is None else tl.standard._sum_combine
_MAX = None if tl is None else tl.standard._elementwise_max

__all__ = ["available", "triton_windowed_scan"]

_MIN_GROUP_RADIUS = 16  # the smallest window a stream group multiplies over (bins each side)


def available() -> bool:
    """Whether triton imports (the kernels then run compiled on CUDA, interpreted on CPU)."""
    return triton is not None


def _scan_forward_kernel(
    hs,  # (t+1, r, p): hs[0] the starting histogram; step s writes its histogram to hs[s+1]
    coef,  # (t, r, 6): (1-r)·dec, (1-r)·keep, (1-r)·inc, r·dec, r·keep, r·inc
    gamma,  # (n,)
    null,  # (t, b, k) no-copy weight
    pos,  # (t, b, k, P) copied mass on offsets 1..P
    rows,
    n_scan,
    n_copy,
    batch,
    steps,
    start,
    support,
    eps,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    COPY: tl.constexpr,
):
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]).to(tl.int64)  # (R, 1) this program's rows
    i = tl.arange(0, BLOCK)[None, :]  # (1, B) bins
    bins = 2 * support + 1
    live = r < rows
    inside = live & (i < bins)  # (R, B)
    offset = i - support
    cursor = r % n_scan
    b = r // n_scan
    g = tl.load(gamma + cursor, mask=live, other=1.0)  # (R, 1)
    copying = live & (cursor < n_copy)
    copy_bins = inside & (offset >= 1) & copying  # offsets 1..P of the copying rows
    is_bottom, is_top = i == 0, i == bins - 1
    below_ok, above_ok = inside & (i >= 1), live & (i + 1 < bins)
    h = tl.load(hs + r * bins + i, mask=inside, other=0.0)  # (R, B)
    for t in range(steps):
        prev = hs + (t * rows + r) * bins
        h_below = tl.load(prev + i - 1, mask=below_ok, other=0.0)  # h[i-1]
        h_above = tl.load(prev + i + 1, mask=above_ok, other=0.0)  # h[i+1]
        c = coef + (t * rows + r) * 6
        c_dec, c_keep, c_inc = tl.load(c, mask=live), tl.load(c + 1, mask=live), tl.load(c + 2, mask=live)
        r_dec, r_keep, r_inc = tl.load(c + 3, mask=live), tl.load(c + 4, mask=live), tl.load(c + 5, mask=live)
        m = h * c_keep + h_below * c_inc + h_above * c_dec  # the banded move
        # the clamp: the edge bins keep what would leave the support (exact zeros inside it)
        m += tl.where(is_bottom, h * c_dec, 0.0) + tl.where(is_top, h * c_inc, 0.0)
        total = tl.reduce(h, 1, _SUM, keep_dims=True)
        # the reset: the total mass re-centred, then one move
        m += total * tl.where(offset == -1, r_dec, tl.where(offset == 0, r_keep, tl.where(offset == 1, r_inc, 0.0)))
        x = m
        if COPY:
            cq = (t * batch + b) * n_copy + cursor
            a_null = tl.load(null + cq, mask=copying, other=1.0)
            x = m * a_null + tl.load(pos + cq * support + offset - 1, mask=copy_bins, other=0.0)
        radius = tl.minimum(start + t + 1, support)
        window = inside & (offset >= -radius) & (offset <= radius)
        log_x = tl.log(tl.where(window, x + eps, 1.0))
        z = tl.where(window, log_x * g, float("-inf"))
        z_max = tl.maximum(tl.reduce(z, 1, _MAX, keep_dims=True), -1e30)  # finite on dead rows
        e = tl.exp(z - z_max)
        y = e / tl.maximum(tl.reduce(e, 1, _SUM, keep_dims=True), 1e-30)
        tl.store(hs + ((t + 1) * rows + r) * bins + i, y, mask=inside)
        tl.debug_barrier()  # the next step reads these rows back shifted by one bin
        h = y


def _scan_backward_kernel(
    hs,  # (t+1, r, p) from the forward
    grad_hs,  # (t, r, p): gradient reaching each step's histogram from its stream (and the last state)
    coef,
    gamma,
    null,
    pos,
    grad_h0,  # (r, p) out
    grad_coef,  # (t, r, 6) out
    grad_gamma,  # (r,) out, summed over b outside
    grad_null,  # (t, b, k) out
    grad_pos,  # (t, b, k, P) out
    scratch,  # (r, p) each row's g_m, read back shifted by one bin
    rows,
    n_scan,
    n_copy,
    batch,
    steps,
    start,
    support,
    eps,
    ROWS: tl.constexpr,
    BLOCK: tl.constexpr,
    COPY: tl.constexpr,
):
    r = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]).to(tl.int64)
    i = tl.arange(0, BLOCK)[None, :]
    bins = 2 * support + 1
    live = r < rows
    inside = live & (i < bins)
    offset = i - support
    cursor = r % n_scan
    b = r // n_scan
    g = tl.load(gamma + cursor, mask=live, other=1.0)
    copying = live & (cursor < n_copy)
    copy_bins = inside & (offset >= 1) & copying
    is_bottom, is_top = i == 0, i == bins - 1
    below_ok, above_ok = inside & (i >= 1), live & (i + 1 < bins)
    carry = tl.full([ROWS, BLOCK], 0.0, hs.dtype.element_ty)  # gradient reaching step t's histogram from t+1
    acc_gamma = tl.full([ROWS, BLOCK], 0.0, hs.dtype.element_ty)
    own = scratch + r * bins
    for back in range(steps):
        t = steps - 1 - back
        # recompute step t's move, copy mix and logarithm from its input histogram, as the forward does
        prev = hs + (t * rows + r) * bins
        h = tl.load(prev + i, mask=inside, other=0.0)
        h_below = tl.load(prev + i - 1, mask=below_ok, other=0.0)
        h_above = tl.load(prev + i + 1, mask=above_ok, other=0.0)
        c = coef + (t * rows + r) * 6
        c_dec, c_keep, c_inc = tl.load(c, mask=live), tl.load(c + 1, mask=live), tl.load(c + 2, mask=live)
        r_dec, r_keep, r_inc = tl.load(c + 3, mask=live), tl.load(c + 4, mask=live), tl.load(c + 5, mask=live)
        m = h * c_keep + h_below * c_inc + h_above * c_dec
        m += tl.where(is_bottom, h * c_dec, 0.0) + tl.where(is_top, h * c_inc, 0.0)
        total = tl.reduce(h, 1, _SUM, keep_dims=True)
        m += total * tl.where(offset == -1, r_dec, tl.where(offset == 0, r_keep, tl.where(offset == 1, r_inc, 0.0)))
        x = m
        if COPY:
            cq = (t * batch + b) * n_copy + cursor
            a_null = tl.load(null + cq, mask=copying, other=1.0)
            x = m * a_null + tl.load(pos + cq * support + offset - 1, mask=copy_bins, other=0.0)
        radius = tl.minimum(start + t + 1, support)
        window = inside & (offset >= -radius) & (offset <= radius)
        x_eps = tl.where(window, x + eps, 1.0)
        log_x = tl.log(x_eps)
        y = tl.load(hs + ((t + 1) * rows + r) * bins + i, mask=inside, other=0.0)
        # the reverse step
        g_y = tl.load(grad_hs + (t * rows + r) * bins + i, mask=inside, other=0.0) + carry
        g_z = y * (g_y - tl.reduce(y * g_y, 1, _SUM, keep_dims=True))  # softmax
        acc_gamma += g_z * log_x
        g_m = g_z * g / x_eps  # g_x; g_m once the copy mix is undone
        if COPY:
            tl.store(grad_null + cq, tl.reduce(g_m * m, 1, _SUM, keep_dims=True), mask=copying)
            tl.store(grad_pos + cq * support + offset - 1, g_m, mask=copy_bins)
            g_m = g_m * a_null
        tl.store(own + i, g_m, mask=inside)
        tl.debug_barrier()
        g_below = tl.load(own + tl.maximum(i - 1, 0), mask=inside, other=0.0)  # G[max(i-1, 0)]: the clamp
        g_above = tl.load(own + tl.minimum(i + 1, bins - 1), mask=inside, other=0.0)  # G[min(i+1, 2P)]
        g_dec = tl.load(own + support - 1, mask=live, other=0.0)  # (R, 1) g_m at offsets -1, 0, 1: the reset
        g_keep = tl.load(own + support, mask=live, other=0.0)
        g_inc = tl.load(own + support + 1, mask=live, other=0.0)
        tl.debug_barrier()  # the next step overwrites the scratch rows
        gc = grad_coef + (t * rows + r) * 6
        tl.store(gc + 3, g_dec * total, mask=live)
        tl.store(gc + 4, g_keep * total, mask=live)
        tl.store(gc + 5, g_inc * total, mask=live)
        g_total = g_dec * r_dec + g_keep * r_keep + g_inc * r_inc
        tl.store(gc, tl.reduce(h * g_below, 1, _SUM, keep_dims=True), mask=live)
        tl.store(gc + 1, tl.reduce(h * g_m, 1, _SUM, keep_dims=True), mask=live)
        tl.store(gc + 2, tl.reduce(h * g_above, 1, _SUM, keep_dims=True), mask=live)
        carry = tl.where(inside, g_below * c_dec + g_m * c_keep + g_above * c_inc + g_total, 0.0)
    tl.store(grad_h0 + r * bins + i, carry, mask=inside)
    tl.store(grad_gamma + r, tl.reduce(acc_gamma, 1, _SUM, keep_dims=True), mask=live)


@functools.cache
def _kernels(interpreted: bool) -> tuple[Any, Any]:
    """(forward, backward) kernels: compiled by Triton, or run by its interpreter (CPU tensors)."""
    if triton is None:
        raise RuntimeError("PRISM's Triton scan needs triton (pip install triton)")
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(_scan_forward_kernel), InterpretedFunction(_scan_backward_kernel)
    return triton.jit(_scan_forward_kernel), triton.jit(_scan_backward_kernel)


def _launch_config(rows: int, bins: int, device: torch.device) -> tuple[tuple[Any, Any], tuple[int], dict[str, int]]:
    """(kernels, grid, launch options) for ``rows`` rows of ``bins`` bins on ``device``.

    On a GPU a program holds a few rows (about 2k values: few idle lanes when the support is
    small, enough programs to fill the SMs); in the interpreter, which runs programs one after
    another and each one's operations with numpy over its whole block, every row at once."""
    block = triton.next_power_of_2(bins)
    interpreted = device.type != "cuda"
    if interpreted:
        per_program = triton.next_power_of_2(rows)
    else:
        per_program = max(1, min(triton.next_power_of_2(rows), 2048 // block))
    # num_stages 1: no software pipelining, which could issue a step's shifted loads before the
    # previous step's store and barrier
    opts = {
        "ROWS": per_program,
        "BLOCK": block,
        "num_warps": max(1, min(8, per_program * block // 256)),
        "num_stages": 1,
    }
    return _kernels(interpreted), (triton.cdiv(rows, per_program),), opts


def _launch(kernel: Any, grid: tuple[int], *args: Any, **opts: Any) -> None:
    """``kernel[grid](*args, **opts)``; a failure (a Triton without what the kernels use, a
    compiler error on an untested GPU) names the way back to the torch scan."""
    try:
        kernel[grid](*args, **opts)
    except Exception as exc:
        raise RuntimeError(
            f"PRISM's Triton scan failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
            "PEZOO_PRISM_SCAN=torch (or pezoo.encodings.prism.fused_scan.set_scan_backend('torch')) runs the torch scan"
        ) from exc


def _radii(start: int, steps: int, support: int) -> list[int]:
    """Window radius after each step: min(start + t + 1, P)."""
    return [min(start + t + 1, support) for t in range(steps)]


def _groups(radii: list[int], support: int) -> list[tuple[int, int, int]]:
    """Consecutive steps that share a stream product: (first, stop, radius of their bins), the
    radius the next power of two >= every radius of the group (at least 16, at most P)."""
    groups: list[tuple[int, int, int]] = []
    for t, w in enumerate(radii):
        cover = min(support, max(_MIN_GROUP_RADIUS, 1 << max(0, w - 1).bit_length()))
        if groups and groups[-1][2] == cover:
            groups[-1] = (groups[-1][0], t + 1, cover)
        else:
            groups.append((t, t + 1, cover))
    return groups


def _emit(hist: Tensor, table: Tensor, radii: list[int], support: int) -> Tensor:
    """Streams (t, b, n, f) = each step's histogram (t, b, n, p) @ table, over the bins each
    group of steps can occupy (the rest are exact zeros)."""
    steps, b, n, _ = hist.shape
    out = hist.new_empty(steps, b, n, table.shape[-1])
    for first, stop, w in _groups(radii, support):
        lo, hi = support - w, support + w + 1
        torch.mm(
            hist[first:stop, ..., lo:hi].reshape(-1, hi - lo), table[lo:hi], out=out[first:stop].view(-1, out.shape[-1])
        )
    return out


def _emit_backward(g_out: Tensor, table: Tensor, radii: list[int], support: int) -> Tensor:
    """The gradient (t, b, n, p) of each step's histogram through ``_emit``: g_out @ tableᵀ."""
    steps, b, n, _ = g_out.shape
    grad = g_out.new_zeros(steps, b, n, 2 * support + 1)
    for first, stop, w in _groups(radii, support):
        lo, hi = support - w, support + w + 1
        grad[first:stop, ..., lo:hi] = (g_out[first:stop].reshape(-1, g_out.shape[-1]) @ table[lo:hi].T).view(
            stop - first, b, n, hi - lo
        )
    return grad


def _copy_masks(probs: Tensor, start: int, support: int) -> Tensor:
    """(t, 1, 1, j) 1 where token j's copied mass enters step t: inside the window (j < w' =
    min(start + t + 1, P)), or every token once the window is the whole support (those
    beyond P − 1 then pile on the top bin)."""
    steps, tokens = probs.shape[0], probs.shape[-1] - 1
    w = (torch.arange(steps, device=probs.device) + start + 1).clamp(max=support)[:, None]  # (t, 1)
    j = torch.arange(tokens, device=probs.device)[None, :]  # (1, j)
    return ((j < w) | (w == support)).to(probs.dtype)[:, None, None, :]


def _copy_inputs(probs: Tensor, start: int, support: int) -> tuple[Tensor, Tensor]:
    """Copy probabilities (t, b, k, j + 1) -> (no-copy weight (t, b, k), mass per offset 1..P
    (t, b, k, P)), as ``fused_scan`` adds them: token i on offset i + 1, tokens past the
    window dropped, tokens beyond P − 1 summed on the top bin."""
    a_pos = probs[..., :-1] * _copy_masks(probs, start, support)
    return probs[..., -1].contiguous(), clamp_copy(a_pos, support).contiguous()


def _copy_grad(g_null: Tensor, g_pos: Tensor, probs: Tensor, start: int, support: int) -> Tensor:
    """The gradient of the copy probabilities from those of ``_copy_inputs``' outputs."""
    tokens = probs.shape[-1] - 1
    index = torch.arange(tokens, device=probs.device).clamp(max=support - 1)  # token j -> offset min(j, P-1) + 1
    grad = torch.empty_like(probs)
    torch.mul(g_pos.index_select(-1, index), _copy_masks(probs, start, support), out=grad[..., :-1])
    grad[..., -1] = g_null
    return grad


def _run_forward(
    h0: Tensor, coef: Tensor, gamma: Tensor, probs: Tensor | None, eps: float, start: int, support: int
) -> tuple[Tensor, Tensor | None, Tensor | None, list[int]]:
    """The forward kernel: ((t+1, b, n, p) histograms with hs[0] = h0 on the full support,
    no-copy weights, copied mass per offset, window radii)."""
    steps, b, n, _ = coef.shape
    bins = 2 * support + 1
    radius = min(start, support)
    hs = h0.new_empty(steps + 1, b, n, bins)
    hs[0] = torch.nn.functional.pad(h0, (support - radius, support - radius))
    radii = _radii(start, steps, support)
    null = pos = None
    if probs is not None:
        null, pos = _copy_inputs(probs, start, support)
    k = 0 if probs is None else probs.shape[-2]
    (forward, _), grid, opts = _launch_config(b * n, bins, h0.device)
    _launch(
        forward,
        grid,
        hs, coef, gamma, null if null is not None else hs, pos if pos is not None else hs,
        b * n, n, k, b, steps, start, support, eps, COPY=probs is not None, **opts,
    )  # fmt: skip
    return hs, null, pos, radii


class _TritonScan(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        h0: Tensor,
        coef: Tensor,
        gamma: Tensor,
        probs: Tensor | None,
        table: Tensor,
        eps: float,
        start: int,
        support: int,
    ) -> tuple[Tensor, Tensor]:
        hs, null, pos, radii = _run_forward(h0, coef, gamma, probs, eps, start, support)
        ctx.eps, ctx.start, ctx.support, ctx.radii = eps, start, support, radii
        ctx.h0_bins = h0.shape[-1]
        ctx.save_for_backward(hs, coef, gamma, probs, table, null, pos)
        return _last_window(hs, start, support), _emit(hs[1:], table, radii, support)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_last: Tensor | None, g_out: Tensor | None) -> tuple[Tensor | None, ...]:
        hs, coef, gamma, probs, table, null, pos = ctx.saved_tensors
        support, radii = ctx.support, ctx.radii
        steps, b, n, _ = coef.shape
        bins = 2 * support + 1
        if g_out is None:
            grad_hs = hs.new_zeros(steps, b, n, bins)
        else:
            grad_hs = _emit_backward(g_out.contiguous(), table, radii, support)
        if steps == 0:  # no step: the last window is the first
            return g_last, torch.zeros_like(coef), torch.zeros_like(gamma), None, None, None, None, None
        if g_last is not None:
            grad_hs[-1, ..., support - radii[-1] : support + radii[-1] + 1] += g_last
        k = 0 if probs is None else probs.shape[-2]
        grad_h0 = hs.new_zeros(b, n, bins)
        grad_coef = torch.empty_like(coef)
        grad_gamma = hs.new_empty(b, n)
        grad_null = hs.new_zeros(steps, b, k)
        grad_pos = hs.new_zeros(steps, b, k, support)
        scratch = hs.new_empty(b * n, bins)
        (_, backward), grid, opts = _launch_config(b * n, bins, hs.device)
        _launch(
            backward,
            grid,
            hs, grad_hs, coef, gamma, null if null is not None else hs, pos if pos is not None else hs,
            grad_h0, grad_coef, grad_gamma, grad_null, grad_pos, scratch,
            b * n, n, k, b, steps, ctx.start, support, ctx.eps, COPY=probs is not None, **opts,
        )  # fmt: skip
        radius = (ctx.h0_bins - 1) // 2
        g_h0 = grad_h0[..., support - radius : support + radius + 1]
        g_probs = None
        if probs is not None and ctx.needs_input_grad[3]:
            g_probs = _copy_grad(grad_null, grad_pos, probs, ctx.start, support)
        return g_h0, grad_coef, grad_gamma.sum(dim=0), g_probs, None, None, None, None


def _last_window(hs: Tensor, start: int, support: int) -> Tensor:
    """The last histogram (b, n, 2w'+1) on its window, w' = min(start + t, P)."""
    w = min(start + hs.shape[0] - 1, support)
    return hs[-1, ..., support - w : support + w + 1].contiguous()


def triton_windowed_scan(
    h0: Tensor,
    coef: Tensor,
    gamma: Tensor,
    table: Tensor,
    eps: float,
    *,
    start: int,
    support: int,
    copy_probs: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``fused_scan.fused_windowed_scan`` (same arguments, same results to float rounding) by
    the Triton kernels. The caller has checked the shapes and cast every input to h0's dtype."""
    coef, gamma, table = coef.contiguous(), gamma.contiguous(), table.contiguous()
    probs = None if copy_probs is None else copy_probs.contiguous()
    h0 = h0.contiguous()
    inputs = (h0, coef, gamma, probs, table)
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs):
        return _TritonScan.apply(h0, coef, gamma, probs, table, eps, start, support)
    hs, _, _, radii = _run_forward(h0, coef, gamma, probs, eps, start, support)
    return _last_window(hs, start, support), _emit(hs[1:], table, radii, support)
