"""PRISM's windowed histogram scan as one autograd node with a hand-written reverse scan.

Axis letters: t steps (new tokens), b batch, n scanned cursors, k copying cursors (the
first k of n), j copyable tokens so far, p bins of the current window (2w+1), f stream
width.

What it computes is exactly ``scan.scan_emitting(..., windowed=True)`` with an offset
table (Lee 2025, Alg. 1 steps 1–5 then Eq. 10): per step t (absolute token ``start + t``)
the window radius grows from w = min(start + t, P) to w' = min(start + t + 1, P), and

    m[i] = c_keep·h[i] + c_inc·h[i-1] + c_dec·h[i+1]   banded move (c_x = (1 - r)·x)
         (+ c_inc·h[top] on the top bin, c_dec·h[0] on the bottom one, once w' = w = P: the clamp)
    m[mid-1 : mid+2] += Σh · (r·dec, r·keep, r·inc)     reset: re-centre, then one move
    x  = a_null·m + p_pos                               copy branch, first k cursors only
    y  = softmax(γ · log(x + ε))                        sharpening (every window bin is reachable)
    out_t = y @ table[P-w' : P+w'+1]                    the cursor's position stream

with p_pos = token i's copied mass ``a_pos[i]`` on offset i + 1 (at the support's edge,
under ``max_support``, tokens beyond P - 1 pile onto the top bin, ``histogram.clamp_copy``).

What is fused and why the results are the same:

* The six coefficients ``(c_dec, c_keep, c_inc, r·dec, r·keep, r·inc)`` are computed for
  all steps at once, outside the loop, by ordinary autograd ops (``scan_coefficients``);
  the loop reads slices of them. The reset term multiplies ``Σh·(r·x)`` where the
  autograd path computes ``(Σh·r)·x``: the same product in another order (one rounding).
* The growing window is one zero pad by two bins and three shifted slices instead of a
  pad by one and in-place slice adds with clamps: the autograd path's clamps act on its
  zero padding there and add exact zeros. The clamp is applied only when the window has
  stopped growing (w = P), where it is the support's own edge rule.
* The total mass Σh is summed every step, as in the autograd path (not assumed 1).
* Forward runs without building a graph; it keeps only what the backward needs: each
  step's ``x + ε``, ``log(x + ε)`` and ``y`` (and the pre-copy ``m`` of the k copying
  cursors), three windows per step where autograd keeps four (about 30 % less memory),
  and the backward then has no transcendental function to evaluate. They are written into
  one block (``_Windows``), not allocated step by step.
* With ``checkpoint_every`` (PRISM's default above ``SCAN_CHECKPOINT_ABOVE`` tokens) the
  forward keeps no windows at all, only the starting window of each chunk of that many
  steps, and the backward recomputes each chunk's windows (the same operations, so the same
  floats) into one block, reused from the last chunk to the first, before its reverse scan.
  This replaced one node per chunk under ``torch.utils.checkpoint``, whose forward kept
  every step's windows in fresh buffers only to drop them: hundreds of buffers of growing
  size between temporaries, which glibc's heap could not reuse for the next chunk's larger
  ones, so the resident memory of a training pass grew as S² while the allocator's live
  bytes grew as S (issue 65; docs/performance.md, "PRISM's resident memory"). The results
  are those of that path bit for bit (γ's gradient is summed per chunk, last chunk first,
  as autograd summed the chunks' nodes).
* The backward is the reverse scan of those formulas, written by hand (with G the
  gradient of m, replicate-padded by one bin once the window has stopped growing, which
  is exactly the transpose of the clamp):

      g_y   = g_out_t @ table_w.T + (gradient from step t+1 through its input)
      g_z   = y·(g_y - Σ y·g_y)              softmax
      g_γ  += Σ g_z·log(x + ε)               g_x = g_z·γ / (x + ε)
      g_m   = a_null·g_x (copy cursors),   g_a_null = Σ g_x·m,   g_a_pos[i] = g_x[offset i + 1]
      g_h   = c_dec·G[i] + c_keep·G[i+1] + c_inc·G[i+2] + Σ_{d} (r·x_d)·g_m[mid+d]
      g_c   = Σ_i h[i]·G[i+s] (s = 0, 1, 2),   g_(r·x_d) = Σh · g_m[mid+d]

  These are the derivatives of the same float operations, so outputs and gradients agree
  with the autograd path to float rounding (tested in float64 to 1e-10 and against an
  independent dense-matrix reference of Alg. 1, plus ``torch.autograd.gradcheck``).

Gradients flow to the starting histogram, the coefficients (hence the gates), γ and the
copy probabilities; the offset table is a constant. a_pos and a_null enter as one tensor
(the copy attention's probabilities, a_null last), so their gradient is one dense buffer:
slicing them apart outside would make autograd allocate and fill two more of that size
(b·k·t² entries, the largest buffers of the copy branch's backward).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from pezoo.encodings.prism.chunks import run_chunked

__all__ = ["SCAN_BACKENDS", "fused_windowed_scan", "scan_backend", "scan_coefficients", "set_scan_backend"]

SCAN_BACKENDS = ("auto", "torch", "triton")
"""Who runs ``fused_windowed_scan``: ``"auto"`` (default) the Triton kernels of
``triton_scan.py`` for CUDA tensors when triton imports, this module's torch loop otherwise
(every CPU run); ``"torch"`` always the torch loop; ``"triton"`` always the kernels (CPU
tensors then run in Triton's interpreter: for tests, very slow). The kernels were compiled
and their tests passed on an H200 (torch 2.11, Triton 3.6; 26 November 2026), where a PRISM
training step took 19.6 ms on them against 33.4 ms on the torch loop at the quick shape and
31.2 against 100.5 ms at the gpu shape (benchmarks/results/cuda-gpu-nvidia-h200.md). The
environment variable ``PEZOO_PRISM_SCAN`` sets it for a process, ``set_scan_backend`` /
``scan_backend`` in code."""

_backend = os.environ.get("PEZOO_PRISM_SCAN", "auto")


def set_scan_backend(name: str) -> str:
    """Set who runs the fused scan (one of ``SCAN_BACKENDS``); returns the previous setting."""
    global _backend
    if name not in SCAN_BACKENDS:
        raise ValueError(f"unknown PRISM scan backend {name!r}; valid: {', '.join(SCAN_BACKENDS)}")
    previous, _backend = _backend, name
    return previous


@contextlib.contextmanager
def scan_backend(name: str) -> Iterator[None]:
    """``set_scan_backend(name)`` for the duration of a ``with`` block."""
    previous = set_scan_backend(name)
    try:
        yield
    finally:
        set_scan_backend(previous)


def check_scan_backend() -> None:
    """Raise a ValueError naming the setting unless it is one of ``SCAN_BACKENDS``: only
    ``PEZOO_PRISM_SCAN`` can make it another (``set_scan_backend`` refuses one). For a
    program to check before it builds or writes anything; the scan checks it again."""
    if _backend not in SCAN_BACKENDS:
        raise ValueError(
            f"PEZOO_PRISM_SCAN={_backend!r} is not a PRISM scan backend; valid: {', '.join(SCAN_BACKENDS)}"
        )


def _use_triton(h0: Tensor) -> bool:
    """Whether this call goes to the Triton kernels (see ``SCAN_BACKENDS``). triton is imported
    only here, when a CUDA tensor or the ``"triton"`` setting asks for it."""
    check_scan_backend()
    if _backend == "torch" or (_backend == "auto" and not h0.is_cuda):
        return False
    from pezoo.encodings.prism import triton_scan

    if _backend == "triton" and not triton_scan.available():
        raise RuntimeError("PRISM scan backend 'triton' needs triton (pip install triton)")
    return triton_scan.available()


def scan_coefficients(gates: Tensor) -> Tensor:
    """(t, ..., 4) gates (reset, inc, dec, keep) -> (t, ..., 6) step coefficients
    ``((1-r)·dec, (1-r)·keep, (1-r)·inc, r·dec, r·keep, r·inc)`` (differentiable)."""
    reset, inc, dec, keep = gates.unbind(dim=-1)
    stay = 1.0 - reset
    return torch.stack([stay * dec, stay * keep, stay * inc, reset * dec, reset * keep, reset * inc], dim=-1)


def _radius(start: int, t: int, support: int) -> int:
    """Window radius after step t (0-based within this call); t = -1 gives the starting radius."""
    return min(start + t + 1, support)


class _Windows:
    """The windows the forward keeps for the backward: x + ε, log(x + ε) and y of each step
    (b, n, 2w'+1), and the copy cursors' pre-copy m (b, k, 2w'+1), as views of one block
    (allocated step by step, they fragmented the heap: the module docstring). ``block``: a
    buffer to reuse when it is large enough (the backward recomputes every chunk in the
    largest chunk's)."""

    def __init__(self, h: Tensor, k: int, widths: list[int], block: Tensor | None = None) -> None:
        b, n, _ = h.shape
        self.shape, self.k, self.widths = (b, n), k, widths
        self.offsets = [0]
        for width in widths:
            self.offsets.append(self.offsets[-1] + width)
        size = (3 * n + k) * b * self.offsets[-1]  # x + ε, log, y, then the copy m
        self.block = block if block is not None and block.numel() >= size else h.new_empty(size)

    def take(self, which: int, t: int) -> Tensor:
        """Step t's window (b, n, 2w'+1) of x + ε (0), log(x + ε) (1) or y (2): a contiguous view."""
        b, n = self.shape
        base = b * (which * n * self.offsets[-1] + n * self.offsets[t])
        return self.block[base : base + b * n * self.widths[t]].view(b, n, self.widths[t])

    def take_copy(self, t: int) -> Tensor:
        """Step t's pre-copy m (b, k, 2w'+1) of the copy cursors."""
        b, n = self.shape
        base = b * (3 * n * self.offsets[-1] + self.k * self.offsets[t])
        return self.block[base : base + b * self.k * self.widths[t]].view(b, self.k, self.widths[t])


def _widths(start: int, steps: int, support: int) -> list[int]:
    """The window width 2w'+1 of each step of a call (or chunk) from token ``start``."""
    return [2 * _radius(start, t, support) + 1 for t in range(steps)]


def _scan_forward(
    h: Tensor,
    coef: Tensor,
    gamma: Tensor,
    probs: Tensor | None,
    table: Tensor,
    eps: float,
    start: int,
    support: int,
    kept: _Windows | None = None,
    *,
    emit: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """The scan without a graph. Returns (last window (b, n, 2w+1), streams (t, b, n, f), or
    None without ``emit``); with ``kept``, each step's windows for the backward are written
    into it (:class:`_Windows`)."""
    steps = coef.shape[0]
    b, n, _ = h.shape
    f = table.shape[-1]
    out = h.new_empty(steps, b, n, f) if emit else None
    g = gamma[:, None]  # (n, 1)
    k = 0 if probs is None else probs.shape[-2]
    tokens = 0 if probs is None else probs.shape[-1] - 1
    # per-step views, made once (indexing inside the loop costs a dispatch per tensor and step)
    c_dec, c_keep, c_inc, c_reset = (coef[..., i:j].unbind(0) for i, j in ((0, 1), (1, 2), (2, 3), (3, 6)))
    out_rows = () if out is None else out.view(steps, b * n, f).unbind(0)  # (b·n, f) per step
    pos_rows = () if probs is None else probs[..., :-1].unbind(0)  # (b, k, j) per step
    null_rows = () if probs is None else probs[..., -1:].unbind(0)  # (b, k, 1) per step
    radius = _radius(start, -1, support)
    for t in range(steps):
        new_radius = _radius(start, t, support)
        xe_out = None if kept is None else kept.take(0, t)
        m = _move(h, new_radius > radius, c_dec[t], c_keep[t], c_inc[t], c_reset[t], new_radius, out=xe_out)
        if k:
            m_copy = m[:, :k]  # (b, k, p) view
            if kept is not None:
                kept.take_copy(t).copy_(m_copy)
            m_copy.mul_(null_rows[t])
            _add_copied(m_copy, pos_rows[t], new_radius, support, tokens)
        xe = m.add_(eps)  # (b, n, 2w'+1)
        if kept is None:
            y = torch.softmax(torch.log(xe).mul_(g), dim=-1)
        else:  # torch.softmax(log(x + ε) * γ) with both windows written into their slots
            log_x = torch.log(xe, out=kept.take(1, t))
            y = torch._softmax(log_x * g, -1, False, out=kept.take(2, t))  # softmax's own kernel
        if out_rows:
            lo = support - new_radius
            width = 2 * new_radius + 1
            torch.mm(y.view(b * n, width), table[lo : lo + width], out=out_rows[t])
        h, radius = y, new_radius
    if kept is not None:  # the last window leaves as its own tensor: a view would hold the whole block
        h = h.clone()
    return h, out


def _move(
    h: Tensor,
    grow: bool,
    c_dec: Tensor,
    c_keep: Tensor,
    c_inc: Tensor,
    c_reset: Tensor,
    mid: int,
    *,
    out: Tensor | None = None,
) -> Tensor:
    """One step's banded move of the window h (b, n, 2w+1) into the window of radius ``mid``
    (w' = w + 1 when it can ``grow``, else w at the support's edge, clamped there), then the
    reset's mass re-centred and moved once: m (b, n, 2w'+1), a new tensor or ``out``."""
    hp = F.pad(h, (2, 2) if grow else (1, 1))  # (b, n, 2w'+3)
    m = torch.mul(hp[..., 1:-1], c_keep, out=out) if out is not None else hp[..., 1:-1] * c_keep  # (b, n, 2w'+1)
    m.addcmul_(hp[..., :-2], c_inc)
    if not grow:  # at the support's edge: the top bin keeps what would leave it
        m[..., -1:].addcmul_(h[..., -1:], c_inc)
    m.addcmul_(hp[..., 2:], c_dec)
    if not grow:
        m[..., :1].addcmul_(h[..., :1], c_dec)
    m[..., mid - 1 : mid + 2].addcmul_(h.sum(dim=-1, keepdim=True), c_reset)
    return m


def _add_copied(m_copy: Tensor, pos: Tensor, radius: int, support: int, tokens: int) -> None:
    """Add the copied mass ``pos`` (b, k, j) to the copy cursors' window ``m_copy`` (b, k, 2w+1)
    of ``radius`` w, in place: token i on offset i + 1 (bin w + i + 1)."""
    mid = radius
    if radius < support:  # token i lands on offset i + 1; later tokens carry no mass (causal)
        m_copy[..., mid + 1 :].add_(pos[..., :radius])
    elif tokens < support:
        m_copy[..., mid + 1 : mid + 1 + tokens].add_(pos)
    else:  # tokens beyond P - 1 pile onto the top bin
        m_copy[..., mid + 1 : -1].add_(pos[..., : support - 1])
        m_copy[..., -1:].add_(pos[..., support - 1 :].sum(dim=-1, keepdim=True))


def _copied_grad(g_pos: Tensor, g_x: Tensor, radius: int, support: int, tokens: int) -> None:
    """The transpose of :func:`_add_copied`: write the gradient of the copied mass, read off
    ``g_x`` (b, k, 2w+1) at the bins it landed on, into one step's ``g_pos`` (b, k, j)."""
    mid = radius
    if radius < support:
        g_pos[..., :radius] = g_x[..., mid + 1 :]
    elif tokens < support:
        g_pos[...] = g_x[..., mid + 1 : mid + 1 + tokens]
    else:
        g_pos[..., : support - 1] = g_x[..., mid + 1 : -1]
        g_pos[..., support - 1 :] = g_x[..., -1:]


def _move_backward(
    g_m: Tensor,
    h: Tensor,
    grow: bool,
    c_dec: Tensor,
    c_keep: Tensor,
    c_inc: Tensor,
    c_reset: Tensor,
    mid: int,
    g_coef: Tensor,
) -> Tensor:
    """The transpose of :func:`_move`: from g_m (b, n, 2w'+1), write the step's coefficient
    gradients into ``g_coef`` (b, n, 6) and return the gradient of h (b, n, 2w+1)."""
    g_centre = g_m[..., mid - 1 : mid + 2]  # (b, n, 3)
    total = h.sum(dim=-1, keepdim=True)  # (b, n, 1)
    g_coef[..., 3:6] = g_centre * total
    g_total = (g_centre * c_reset).sum(dim=-1, keepdim=True)
    if grow:
        big = g_m  # (b, n, 2w+3)
    else:  # replicate-padded by one bin: the transpose of the move and its clamp
        big = F.pad(g_m, (1, 1))
        big[..., :1] = g_m[..., :1]
        big[..., -1:] = g_m[..., -1:]
    shifted = (big[..., :-2], big[..., 1:-1], big[..., 2:])  # G[i], G[i+1], G[i+2] for i over h's bins
    g_h = shifted[0] * c_dec
    g_h.addcmul_(shifted[1], c_keep).addcmul_(shifted[2], c_inc).add_(g_total)
    for s in range(3):
        g_coef[..., s] = torch.linalg.vecdot(h, shifted[s])
    return g_h


def _scan_backward(
    kept: _Windows,
    h0: Tensor,
    coef: Tensor,
    gamma: Tensor,
    probs: Tensor | None,
    table: Tensor,
    start: int,
    support: int,
    g_out: Tensor | None,
    carry: Tensor | None,
    g_coef: Tensor,
    g_gamma: Tensor,
    g_probs: Tensor | None,
) -> Tensor | None:
    """The reverse scan over the steps of one forward (a call, or a chunk of one) from the
    windows ``kept`` and its starting window ``h0`` (b, n, 2w+1): writes the steps' gradients
    into ``g_coef`` (t, b, n, 6), ``g_gamma`` (t, b, n) and, if given, ``g_probs`` (t, b, k, j+1);
    ``carry`` is the gradient reaching the last window (None: none). Returns the gradient of h0
    (None: none reached it)."""
    steps = coef.shape[0]
    b, n = kept.shape
    f = table.shape[-1]
    k = 0 if probs is None else probs.shape[-2]
    tokens = 0 if probs is None else probs.shape[-1] - 1
    g = gamma[:, None]  # (n, 1)
    c_dec, c_keep, c_inc, c_reset = (coef[..., i:j].unbind(0) for i, j in ((0, 1), (1, 2), (2, 3), (3, 6)))
    null_rows = () if probs is None else probs[..., -1:].unbind(0)
    g_out_rows = () if g_out is None else g_out.reshape(steps, b * n, f).unbind(0)
    g_coef_rows = g_coef.unbind(0)
    g_pos = None if g_probs is None else g_probs[..., :-1]
    g_null = None if g_probs is None else g_probs[..., -1:]
    for t in reversed(range(steps)):
        new_radius = _radius(start, t, support)
        grow = new_radius > _radius(start, t - 1, support)
        y, xe = kept.take(2, t), kept.take(0, t)
        h = kept.take(2, t - 1) if t else h0
        lo, width = support - new_radius, 2 * new_radius + 1
        tw = table[lo : lo + width]  # (p, f)
        if g_out is None:
            g_y = torch.zeros_like(y) if carry is None else carry.clone()
        elif carry is None:
            g_y = torch.mm(g_out_rows[t], tw.T).view(b, n, width)
        else:
            g_y = torch.addmm(carry.reshape(b * n, width), g_out_rows[t], tw.T).view(b, n, width)
        g_z = g_y.sub_(torch.linalg.vecdot(y, g_y)[..., None]).mul_(y)  # softmax
        g_gamma[t] = torch.linalg.vecdot(g_z, kept.take(1, t))
        g_m = g_z.mul_(g).div_(xe)  # g_x, then g_m after the copy mix below
        if k:
            g_x = g_m[:, :k]  # (b, k, p) view
            if g_pos is not None and g_null is not None:
                g_null[t] = torch.linalg.vecdot(g_x, kept.take_copy(t))[..., None]
                _copied_grad(g_pos[t], g_x, new_radius, support, tokens)
            g_x.mul_(null_rows[t])
        carry = _move_backward(g_m, h, grow, c_dec[t], c_keep[t], c_inc[t], c_reset[t], new_radius, g_coef_rows[t])
    return carry


class _WindowedScan(torch.autograd.Function):
    """The fused scan's autograd node. With ``chunk`` (0 < chunk < steps) the forward keeps no
    windows, only the starting window of every ``chunk`` steps, and the backward recomputes
    each chunk's windows (last chunk first, all in one buffer) before its reverse scan:
    ``torch.utils.checkpoint`` over chunks of the scan, inside the node. Without, the forward
    keeps every step's windows in one block."""

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
        chunk: int,
    ) -> tuple[Tensor, Tensor]:
        steps = coef.shape[0]
        chunk = chunk if 0 < chunk < steps else steps
        k = 0 if probs is None else probs.shape[-2]
        ctx.eps, ctx.start, ctx.support, ctx.chunk = eps, start, support, chunk
        ctx.has_copy, ctx.all_kept = probs is not None, chunk == steps
        if chunk == steps:
            kept = _Windows(h0, k, _widths(start, steps, support))
            last, out = _scan_forward(h0, coef, gamma, probs, table, eps, start, support, kept)
            ctx.save_for_backward(h0, coef, gamma, probs, table, kept.block)
            assert out is not None
            return last, out
        starts, outs, h = [], [], h0  # each chunk's starting window and streams
        for first in range(0, steps, chunk):
            stop = min(first + chunk, steps)
            starts.append(h)
            chunk_probs = None if probs is None else probs[first:stop]
            h, out = _scan_forward(h, coef[first:stop], gamma, chunk_probs, table, eps, start + first, support)
            assert out is not None
            outs.append(out)
        ctx.save_for_backward(coef, gamma, probs, table, *starts)
        return h, torch.cat(outs, dim=0)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g_last: Tensor | None, g_out: Tensor | None) -> tuple[Tensor | None, ...]:
        start, support, chunk = ctx.start, ctx.support, ctx.chunk
        if ctx.all_kept:  # every step's windows, in one block
            h0, coef, gamma, probs, table, block = ctx.saved_tensors
            starts = [h0]
        else:  # each chunk's starting window: its windows are recomputed, every chunk's in the largest one's block
            coef, gamma, probs, table, *starts = ctx.saved_tensors
        steps = coef.shape[0]
        k = probs.shape[-2] if ctx.has_copy else 0
        if not ctx.all_kept:
            b, n = starts[0].shape[:2]
            firsts = range(0, steps, chunk)
            widest = max(sum(_widths(start + first, min(chunk, steps - first), support)) for first in firsts)
            block = starts[0].new_empty((3 * n + k) * b * widest)
        g_coef = torch.empty_like(coef)  # (t, b, n, 6)
        g_gamma = starts[0].new_zeros(steps, *starts[0].shape[:2])  # (t, b, n), summed per chunk below
        g_gamma_sum: Tensor | None = None
        # one dense gradient for the copy probabilities, laid out like them (a fresh buffer
        # of this size costs its page faults; slicing probs outside would add two more)
        g_probs = torch.zeros_like(probs) if k and ctx.needs_input_grad[3] else None
        carry = g_last  # the gradient reaching the current chunk's last window
        for index in reversed(range(len(starts))):
            first = index * chunk
            stop = min(first + chunk, steps)
            part = slice(first, stop)
            chunk_probs = None if probs is None else probs[part]
            kept = _Windows(starts[index], k, _widths(start + first, stop - first, support), block)
            if not ctx.all_kept:  # recompute this chunk's windows
                _scan_forward(
                    starts[index], coef[part], gamma, chunk_probs, table, ctx.eps, start + first, support, kept,
                    emit=False,
                )  # fmt: skip
            carry = _scan_backward(
                kept, starts[index], coef[part], gamma, chunk_probs, table, start + first, support,
                None if g_out is None else g_out[part], carry, g_coef[part], g_gamma[part],
                None if g_probs is None else g_probs[part],
            )  # fmt: skip
            # summed per chunk, last first: the order autograd added the chunks' nodes' sums in
            part_sum = g_gamma[part].sum(dim=(0, 1))
            g_gamma_sum = part_sum if g_gamma_sum is None else g_gamma_sum + part_sum
        return carry, g_coef, g_gamma_sum, g_probs, None, None, None, None, None


def fused_windowed_scan(
    h0: Tensor,
    coef: Tensor,
    gamma: Tensor,
    table: Tensor,
    eps: float,
    *,
    start: int,
    support: int,
    copy_probs: Tensor | None = None,
    checkpoint_every: int = 0,
) -> tuple[Tensor, Tensor]:
    """The windowed scan with streams, forward without a graph and a hand-written backward.

    Args:
        h0: (b, n, 2w+1) starting window, w = min(start, support).
        coef: (t, b, n, 6) from :func:`scan_coefficients`.
        gamma: (n,) sharpening exponents.
        table: (2P+1, f) offset table (a constant: it gets no gradient).
        eps: ε.
        start: absolute index of the first new token.
        support: P.
        copy_probs: (t, b, k, j + 1) copy probabilities of the first k cursors, or None: token
            i's copied mass (landing on offset i + 1), then p_null (the no-copy weight) last.
        checkpoint_every: when a backward pass will follow, keep only every this many steps'
            starting window and recompute each chunk's windows in the backward (0: keep every
            step's). The same outputs and gradients (to float rounding: γ's gradient is summed
            over the chunks).

    Returns:
        (last window (b, n, 2w'+1) with w' = min(start + t, P), streams (t, b, n, f)).
    """
    radius = min(start, support)
    if h0.shape[-1] != 2 * radius + 1:
        raise ValueError(f"h0 must be the window of radius min(start, P) = {radius}, got {h0.shape[-1]} bins")
    dtype = h0.dtype
    coef, gamma, table = coef.to(dtype), gamma.to(dtype), table.to(dtype)
    probs = None if copy_probs is None else copy_probs.to(dtype)
    # fp32 streams, like the compute dtype of the scan (a device without autocast, such as meta
    # for shape inference, has none to turn off: torch.autocast refuses it)
    no_autocast = contextlib.nullcontext() if h0.is_meta else torch.autocast(h0.device.type, enabled=False)
    with no_autocast:
        inputs = (h0, coef, gamma, probs, table)
        grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)
        if _use_triton(h0):
            from pezoo.encodings.prism.triton_scan import triton_windowed_scan

            def run(h: Tensor, first: int, stop: int) -> tuple[Tensor, Tensor]:
                chunk_probs = None if probs is None else probs[first:stop]
                return triton_windowed_scan(
                    h, coef[first:stop], gamma, table, eps, start=start + first, support=support,
                    copy_probs=chunk_probs,
                )  # fmt: skip

            return run_chunked(run, h0, coef.shape[0], checkpoint_every if grad else 0)
        if grad:
            return _WindowedScan.apply(h0, coef, gamma, probs, table, eps, start, support, checkpoint_every)
        last, out = _scan_forward(h0, coef, gamma, probs, table, eps, start, support)
        assert out is not None
        return last, out
