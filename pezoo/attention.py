"""Reference attention that consumes the PE interface, with interchangeable backends.

Axis letters: b batch, h heads, i queries, j keys, e q/k head dim, f value head dim,
d model width.

Every backend computes ``softmax(scale * q kᵀ + biases + masks) v`` and must agree with
``eager`` (tests check it). Backends differ only in *how* structured biases are lowered:

    eager   explicit softmax over a materialised (b, h, i, j) score tensor; the only
            backend that can return attention probabilities (for plots/diagnostics).
    sdpa    torch.nn.functional.scaled_dot_product_attention with a materialised
            additive mask (or ``is_causal`` when there is nothing else to add); on CPU
            where SDPA's own kernel is measured slower (bf16/fp16 below
            ``CPU_LOW_PRECISION_MATH_MAX_SCORES``, some PRISM shapes) the same math
            written out.

More backends register themselves in ``BACKENDS`` (see ``register_backend``).

An encoding's score transform and normaliser (:mod:`pezoo.scores`) reach the backends that
take them as the keywords ``transform=`` and ``normaliser=``, and only those: ``attend``
refuses any other backend, naming the ones that can. ``eager`` takes both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext, check_batch
from pezoo.interface import PositionalEncoding
from pezoo.registry import UnknownNameError, unknown_name_message
from pezoo.scores import Normaliser, ScoreTransform, apply_transform, check_backend

__all__ = ["BACKENDS", "SelfAttention", "attend", "dense_mask", "register_backend", "runnable_backend"]

Backend = Callable[
    [Tensor, Tensor, Tensor, AttentionContext, Sequence[AttentionBias], float, bool],
    tuple[Tensor, Tensor | None],
]
"""(q, k, v, ctx, biases, scale, return_probs) -> (out (b,h,i,f), probs (b,h,i,j) or None).
A backend that takes score transforms or normalisers also accepts them as the keywords
``transform`` and ``normaliser`` (:mod:`pezoo.scores`), and is named in their ``backends``."""

BACKENDS: dict[str, Backend] = {}


def register_backend(name: str) -> Callable[[Backend], Backend]:
    def deco(fn: Backend) -> Backend:
        if name in BACKENDS:
            raise ValueError(f"attention backend {name!r} is already registered")
        BACKENDS[name] = fn
        return fn

    return deco


def dense_mask(
    ctx: AttentionContext,
    biases: Sequence[AttentionBias],
    n_heads: int,
    n_queries: int,
    n_keys: int,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor | None:
    """All biases, the causal mask and key padding as one additive (b|1, h|1, i, j) tensor.

    Returns None when there is nothing to add. Rows with every key masked (queries at
    padding positions) are left unmasked so softmax stays finite; their outputs are
    meaningless and callers ignore them.
    """
    total: Tensor | None = None
    for bias in biases:
        term = bias.materialize(ctx, n_heads, dtype).to(device)
        total = term if total is None else total + term
    allowed: Tensor | None = None
    if ctx.causal and n_queries > 1:  # a single newest query sees every key anyway
        q_idx = torch.arange(n_queries, device=device) + (n_keys - n_queries)
        allowed = torch.arange(n_keys, device=device)[None, :] <= q_idx[:, None]  # (i, j)
        allowed = allowed[None, None]
    if ctx.key_padding_mask is not None:
        pad = ctx.key_padding_mask.to(device)[:, None, None, :]  # (b, 1, 1, j)
        allowed = pad if allowed is None else allowed & pad
    if allowed is not None:
        zero = torch.zeros((), dtype=dtype, device=device)
        masked = torch.where(allowed, zero, torch.full((), -math.inf, dtype=dtype, device=device))
        total = masked if total is None else total + masked
    if total is None:
        return None
    # rows with every key masked, found before broadcasting to (i, j): a padding-only mask is
    # (b, 1, 1, j), and testing its expanded copy element by element cost 20 ms per layer at
    # batch 128 x 80 (the ruoss encoder). Expanding duplicates rows, so the verdict is the same.
    dead = torch.isneginf(total).all(dim=-1, keepdim=True)  # (b|1, h|1, i|1, 1)
    total = total.expand(*total.shape[:2], n_queries, n_keys)
    return total.masked_fill(dead, 0.0)  # unconditionally: an `if dead.any()` breaks torch.compile's graph


@register_backend("eager")
def _eager(q, k, v, ctx, biases, scale, return_probs, *, transform=None, normaliser=None):
    scores = torch.einsum("bhie,bhje->bhij", q, k) * scale  # (b, h, i, j)
    mask = dense_mask(ctx, biases, q.shape[1], q.shape[2], k.shape[2], scores.dtype, q.device)
    if transform is None and normaliser is None:
        if mask is not None:
            scores = scores + mask
        probs = _softmax(scores)
    else:
        probs = _transformed_weights(scores, mask, transform, normaliser)
    out = torch.einsum("bhij,bhjf->bhif", probs, v)  # (b, h, i, f)
    return out, probs if return_probs else None


def _transformed_weights(
    scores: Tensor, mask: Tensor | None, transform: ScoreTransform | None, normaliser: Normaliser | None
) -> Tensor:
    """Attention weights (b, h, i, j) from scores (b, h, i, j) and :func:`dense_mask`'s additive
    mask, through a score transform and/or normaliser: the biases (the mask's finite part) go to
    the transform, the masked pairs (its -inf) are masked after it (:mod:`pezoo.scores`)."""
    allowed = None if mask is None else ~torch.isneginf(mask)  # (b|1, h|1, i, j)
    bias = None if mask is None or allowed is None else mask.masked_fill(~allowed, 0.0)
    if transform is not None:
        scores = apply_transform(transform, scores, bias)
    elif bias is not None:
        scores = scores + bias
    if normaliser is not None:
        return normaliser(scores, allowed)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, -math.inf)
    return _softmax(scores)


@register_backend("sdpa")
def _sdpa(q, k, v, ctx, biases, scale, return_probs):
    if return_probs:
        raise ValueError("the sdpa backend cannot return attention probabilities; use backend='eager'")
    i, j = q.shape[2], k.shape[2]
    plain_causal = ctx.causal and i == j and not biases and ctx.key_padding_mask is None
    if plain_causal:
        return _fused_sdpa(q, k, v, is_causal=True, scale=scale), None
    mask = dense_mask(ctx, biases, q.shape[1], i, j, q.dtype, q.device)
    return _fused_sdpa(q, k, v, attn_mask=mask, scale=scale), None


CPU_VALUE_PAD_MIN_SCORES = 256 * 256
"""On CPU, SDPA's fused kernel needs values as wide as queries/keys; otherwise it falls back to
the math path, which builds the (b, h, i, j) scores (PRISM widens q/k with its streams: 316 MiB
at S = 2048 with 8 heads, not feasible at 8192). From this many scores per head on, values are
zero-padded to the q/k width instead (measured as fast or faster from 256 × 256 on; below, the
math path is faster). See docs/performance.md."""


def _cpu_has_amx() -> bool:
    """Whether this CPU has AMX tiles, on which SDPA's fused CPU kernel runs its bf16 blocks."""
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)  # private; absent: assume none
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # a probe that fails says nothing: keep the rule measured without AMX
        return False


CPU_LOW_PRECISION_MATH_MAX_SCORES = 32 * 1024 if _cpu_has_amx() else 1024 * 1024
"""On CPU in bfloat16 / float16 (autocast), SDPA's fused kernel is slower than the explicit
matmul-softmax-matmul for short sequences, which runs at the low-precision matmul speed. Without
AMX (an AMD EPYC with AVX512-BF16; forward + backward, 1 thread, bf16 vs the explicit path):
18.2 vs 4.5 ms at batch 64 x 4 heads x 24 tokens x head dim 32 (the quick size), 220 vs 47 ms
at 128 x 8 x 80 x 8 (the ruoss size), 11.5 vs 5.7 ms at 4 x 4 x 256 x 32, even at
1 x 4 x 1024 x 32, while at 1 x 8 x 2048 x 8 the fused kernel wins (184 vs 341 ms) and needs
no (i, j) scores: from 1024 x 1024 scores per head on, SDPA. With AMX (an Intel Xeon, causal,
29 November 2026) the fused kernel wins much sooner: fused/explicit 5.5 at the quick size, 2.6
at the ruoss size, 1.38 at 8 x 4 x 160 x 32, 0.65 at 8 x 4 x 192 x 32, 0.60-0.90 at 256, 0.33 at
1 x 4 x 1024 x 32, 0.11 at 1 x 8 x 2048 x 8 (fp16 alike: 1.16 at 160, 0.67 at 192, 0.48 at
1024, without AMX-FP16): from 32 x 1024 (181 x 181) scores on, SDPA.
Below this many scores per head the explicit path runs. See docs/performance.md ("Precision")."""

LOW_PRECISION = (torch.bfloat16, torch.float16)


def _fused_sdpa(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
    """``F.scaled_dot_product_attention``, with values zero-padded where that keeps CPU on the
    fused kernel; below that size, for queries wider than the key count, the scores-first math
    (:func:`_scores_first`) that the CPU would otherwise run with q and k pre-scaled. On CPU in
    bf16/fp16 below :data:`CPU_LOW_PRECISION_MATH_MAX_SCORES` scores per head, the explicit
    path too: there it is the faster one."""
    e, f = q.shape[-1], v.shape[-1]
    if (
        q.device.type == "cpu"
        and q.dtype in LOW_PRECISION
        and q.shape[-2] * k.shape[-2] < CPU_LOW_PRECISION_MATH_MAX_SCORES
    ):
        return _scores_first(q, k, v, **kwargs)
    if q.device.type == "cpu" and f < e:
        if q.shape[-2] * k.shape[-2] >= CPU_VALUE_PAD_MIN_SCORES:
            out = F.scaled_dot_product_attention(q, k, F.pad(v, (0, e - f)), **kwargs)  # (b, h, i, e)
            return out[..., :f]  # zero value features contribute nothing: the first f are the output
        if e > k.shape[-2] and q.dtype in (torch.float32, torch.float64):
            return _scores_first(q, k, v, **kwargs)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


def _scores_first(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """SDPA's math with the scale applied to the (i, j) scores instead of to q and k.

    torch's CPU math path multiplies q and k by √scale each (forward and backward), a pass
    over each (b, h, ·, e) tensor; PRISM's extended q/k are e = 32 + C·d_pe wide (936 for
    prism{paper} at the quick size) while a short sequence has few keys, so scaling the
    (b, h, i, j) scores is a small fraction of that work. Pre-scaling is torch's guard
    against fp16 overflow in q·k, so in float16 q is scaled first (one pass over q; bf16 has
    float32's exponent range and needs none).
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if q.dtype == torch.float16:
        q, scale = q * scale, 1.0
    scores = (q @ k.transpose(-2, -1)) * scale  # (b, h, i, j)
    if attn_mask is not None:
        scores = scores + attn_mask
    elif is_causal:
        i, j = scores.shape[-2:]  # top-left aligned, as F.scaled_dot_product_attention's is_causal
        allowed = torch.ones(i, j, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~allowed, -math.inf)
    return _softmax(scores) @ v


def _softmax(scores: Tensor) -> Tensor:
    """Softmax over keys; a bf16/fp16 one is taken in float32 and cast back: more exact, and on
    CPU 3x faster forward + backward than torch's bf16 kernel (0.52 vs 1.63 ms at the quick
    size's (64, 4, 23, 23))."""
    if scores.dtype in LOW_PRECISION:
        return F.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    return scores.softmax(dim=-1)


def runnable_backend(backend: str, pe: PositionalEncoding) -> str:
    """The backend a model configured with ``backend`` runs ``pe`` on: ``backend`` where the
    encoding runs on it (or it is ``auto``), else the first one the encoding names
    (:meth:`~pezoo.PositionalEncoding.attention_backends`: stick-breaking's normaliser runs on
    eager only). For a model whose backend is one setting shared by every encoding of a
    comparison (the benchmark's backbone); :func:`attend` itself refuses a backend that
    cannot run the hooks it is given."""
    takes = pe.attention_backends()
    if takes is None or backend == "auto" or backend in takes:
        return backend
    return takes[0]


def _check_positions(q: Tensor, k: Tensor, ctx: AttentionContext) -> None:
    """Raise a ValueError unless ``ctx`` holds a position for every query of q and every key
    of k (cached ones included), with a batch of 1 or q's: a bias built from positions (ALiBi,
    T5, FIRE, KERPLE, ...) broadcast over positions of another shape silently (one position
    for six tokens: distance 0 everywhere, the output NoPE's) or failed in torch's words."""
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"attend wants q and k of shape (b, h, s, e); got {tuple(q.shape)} and {tuple(k.shape)}")
    sides = (("q_pos", ctx.q_pos, q, "queries", "query"), ("k_pos", ctx.k_pos, k, "keys", "key"))
    for name, pos, x, what, one in sides:
        if pos.shape[-1] != x.shape[-2]:
            cached = ", cached ones included" if name == "k_pos" else ""
            raise ValueError(
                f"attend got {x.shape[-2]} {what} on axis 2 of {name[0]} for {pos.shape[-1]} positions in "
                f"ctx.{name}: ctx holds one position per {one}{cached} ((b|1, s) positions, (b, h, s, e) tensors)"
            )
    check_batch("attend", q, k, ctx)


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise a ValueError unless k and v are one set of keys and values for q: the same batch
    (or 1), head width for q and k, key count for k and v, and key/value heads that divide
    q's (grouped-query attention; each backend failed in torch's words, flex after a wasted
    compile)."""
    if v.dim() != 4:
        raise ValueError(f"attend wants v of shape (b, g, j, f); got {tuple(v.shape)}")
    (b, h, _, e), (bk, g, j, _), (bv, gv, jv, _) = q.shape, k.shape, v.shape
    problem = None
    if q.shape[-1] != k.shape[-1]:
        problem = f"q and k must share their head width (axis 3): {e} and {k.shape[-1]}"
    elif (g, j) != (gv, jv):
        problem = f"k and v must have the same heads and keys (axes 1, 2): {(g, j)} and {(gv, jv)}"
    elif g == 0 or h % g:
        problem = (
            f"k and v have {g} heads, which must divide q's {h} (grouped-query attention: each key/value head "
            "serves h/g query heads)"
        )
    elif bk not in (b, 1) or bv not in (b, 1):  # no set: a traced batch size is not hashable
        problem = f"k and v have batch {bk}, {bv} for q's {b} (1 broadcasts)"
    if problem is not None:
        raise ValueError(
            f"attend: {problem}; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
            "(q (b, h, i, e), k (b, g, j, e), v (b, g, j, f))"
        )


def repeat_heads(x: Tensor, heads: int) -> Tensor:
    """(b, g, j, e) -> (b, h, j, e), each key/value head repeated for its h/g query heads in
    order (grouped-query attention: query head i reads key/value head i // (h/g), as
    transformers' ``repeat_kv``); x itself when g = h, a view when g = 1."""
    if x.shape[1] == heads:
        return x
    if x.shape[1] == 1:
        return x.expand(x.shape[0], heads, *x.shape[2:])
    return x.repeat_interleave(heads // x.shape[1], dim=1)


def _check_dtypes(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise a ValueError unless q, k and v share a dtype (outside autocast, which casts them
    itself): eager and sdpa failed in torch's words ("expected scalar type BFloat16 but found
    Float"), and flex ran them silently in q's dtype."""
    if q.dtype == k.dtype == v.dtype or torch.is_autocast_enabled(q.device.type):
        return
    raise ValueError(
        f"attend wants q, k and v of one dtype; got q {q.dtype}, k {k.dtype}, v {v.dtype}: cast them to one "
        "(or run under torch.autocast)"
    )


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    ctx: AttentionContext,
    biases: Sequence[AttentionBias] = (),
    *,
    scale: float | None = None,
    backend: str = "eager",
    return_probs: bool = False,
    transform: ScoreTransform | None = None,
    normaliser: Normaliser | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention of q (b,h,i,e) over k (b,g,j,e), v (b,g,j,f) under ``ctx`` and ``biases``.

    g is h, or a divisor of h for grouped-query (and multi-query, g = 1) attention: each
    key/value head serves h/g consecutive query heads (:func:`repeat_heads`).

    Args:
        scale: score scale; default 1/sqrt(``ctx.head_dim``), the model's head dim
            before an encoding widened q/k (PRISM records it in its ``qk`` hook), or
            1/sqrt(e) of the q given when ``ctx.head_dim`` is None.
        backend: a key of ``BACKENDS``.
        return_probs: also return the (b, h, i, j) attention probabilities (eager only).
        transform: the encoding's score transform (``pe.score_transform(layer, ctx)``), or None.
        normaliser: the encoding's normaliser (``pe.normaliser(layer, ctx)``), or None: softmax.

    Returns:
        (out (b, h, i, f), probs or None)

    Raises:
        ValueError: ``backend`` cannot express ``transform`` or ``normaliser`` (the message
            names the backends that can); q, k and v of different dtypes outside autocast, or
            of shapes that do not fit together (key/value heads that do not divide q's, k and v
            of other key counts, q and k of other head widths).
    """
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise UnknownNameError(unknown_name_message("attention backend", backend, sorted(BACKENDS))) from None
    _check_positions(q, k, ctx)
    _check_shapes(q, k, v)
    _check_dtypes(q, k, v)
    k, v = repeat_heads(k, q.shape[1]), repeat_heads(v, q.shape[1])  # grouped-query: every query head its keys
    if scale is None:
        scale = 1.0 / math.sqrt(ctx.head_dim if ctx.head_dim is not None else q.shape[-1])
    if transform is None and normaliser is None:
        return fn(q, k, v, ctx, biases, scale, return_probs)
    check_backend(backend, transform, normaliser)
    hooked: Callable[..., tuple[Tensor, Tensor | None]] = fn  # a backend that takes them has the keywords
    return hooked(q, k, v, ctx, biases, scale, return_probs, transform=transform, normaliser=normaliser)


class SelfAttention(nn.Module):
    """Multi-head self-attention that applies a ``PositionalEncoding``'s hooks.

    Keys/values of earlier calls are kept in ``ctx.state`` (a KV cache), so feeding a
    sequence token by token with one persistent state equals one full forward pass.

    Args:
        d_model: model width d.
        n_heads: heads h.
        layer: index of this layer, passed to the encoding's hooks.
        backend: attention backend name (``BACKENDS``).
        head_dim: each head's width e (default d / h, which must then divide; q, k and v are
            h·e wide, as in models whose heads are wider than d / h).
    """

    def __init__(
        self, d_model: int, n_heads: int, *, layer: int, backend: str = "eager", head_dim: int | None = None
    ) -> None:
        super().__init__()
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
            head_dim = d_model // n_heads
        self.n_heads, self.head_dim, self.layer, self.backend = n_heads, head_dim, layer, backend
        self.qkv = nn.Linear(d_model, 3 * n_heads * head_dim, bias=False)
        self.out = nn.Linear(n_heads * head_dim, d_model, bias=False)

    def forward(
        self, x: Tensor, pe: PositionalEncoding, ctx: AttentionContext, *, return_probs: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x (b, i, d) -> (out (b, i, d), probs (b, h, i, j) or None)."""
        q, k, v = rearrange(self.qkv(x), "b i (three h e) -> three b h i e", three=3, h=self.n_heads)
        q, k = pe.qk(self.layer, q, k, ctx)  # new keys transformed once, before caching
        # the cache is read where k_pos says keys precede the queries, and written where the
        # state is kept: a full pass whose state is dropped touches no per-layer key of
        # ctx.state, which under torch.compile pinned each block's graph to its layer
        cache_key = ("kv", self.layer)
        if ctx.n_cached:
            if cache_key not in ctx.state:
                raise ValueError(
                    f"ctx.k_pos holds {ctx.n_cached} key(s) before the queries, but ctx.state has no KV cache "
                    f"for layer {self.layer}: decode with the state of the calls that fed them"
                )
            k_old, v_old = ctx.state[cache_key]
            k, v = torch.cat([k_old, k], dim=2), torch.cat([v_old, v], dim=2)  # (b, h, j, e)
        if ctx.state_kept:
            ctx.state[cache_key] = (k, v)
        biases = pe.bias(self.layer, q, k, ctx)
        out, probs = attend(
            q,
            k,
            v,
            ctx,
            biases,
            scale=1.0 / math.sqrt(self.head_dim),
            backend=self.backend,
            return_probs=return_probs,
            transform=pe.score_transform(self.layer, ctx),
            normaliser=pe.normaliser(self.layer, ctx),
        )
        return self.out(rearrange(out, "b h i f -> b i (h f)")), probs
