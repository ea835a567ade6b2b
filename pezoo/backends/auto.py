"""The ``auto`` backend, which picks, per call: ``eager`` when attention probabilities are requested; with a
score transform or normaliser (:mod:`pezoo.scores`), one of the backends that take it (flex on CUDA where
it does and lowers every bias, else eager); on CUDA
``xformers`` when it is installed and can lower every bias without a dense tensor, else
``flex`` when every bias has a native flex lowering, else ``sdpa``; on CPU always
``sdpa`` (flex on CPU costs a ~30 s compile per shape family and cannot train), which in
bf16/fp16 (autocast) runs the explicit matmul-softmax path below 1024 x 1024 scores per head:
measured 2-5x faster there than SDPA's own CPU kernel (``pezoo.attention.CPU_LOW_PRECISION_MATH_MAX_SCORES``).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from pezoo.attention import BACKENDS, register_backend
from pezoo.backends.flex import flex_compile_enabled
from pezoo.backends.xformers import xformers_available, xformers_plan
from pezoo.biases import (
    AttentionBias,
    BlockMask,
    DenseBias,
    DifferenceBias,
    LinearBias,
    RelativeFunctionBias,
    WindowMask,
)
from pezoo.context import AttentionContext
from pezoo.scores import Normaliser, ScoreTransform, hook_backends

__all__ = ["native_lowering", "pick_backend"]


def native_lowering(backend: str, biases: Sequence[AttentionBias], ctx: AttentionContext | None = None) -> bool:
    """Whether ``backend`` lowers every bias without building an (i, j) tensor of its own.

    ``DenseBias`` already is a tensor, so it counts as native wherever it can be read
    in place (flex). ``eager`` and ``sdpa`` materialise everything.
    """
    if backend == "flex":
        native = (LinearBias, WindowMask, BlockMask, RelativeFunctionBias, DenseBias, DifferenceBias)
        return all(isinstance(bias, native) for bias in biases)
    if backend == "xformers":
        return ctx is not None and xformers_plan(ctx, biases, n_queries=ctx.q_pos.shape[-1]) is not None
    return not biases


def pick_backend(
    q: Tensor,
    ctx: AttentionContext,
    biases: Sequence[AttentionBias],
    *,
    return_probs: bool = False,
    transform: ScoreTransform | None = None,
    normaliser: Normaliser | None = None,
) -> str:
    """The backend ``auto`` uses for this call (see the module docstring for the rule)."""
    if return_probs:
        return "eager"
    takes = hook_backends(transform, normaliser)
    if takes is not None:  # a score transform or normaliser: only the backends that take it
        fused = q.device.type == "cuda" and q.shape[2] > 1 and flex_compile_enabled()
        if "flex" in takes and fused and native_lowering("flex", biases):
            return "flex"
        return "eager" if "eager" in takes else takes[0]
    if q.device.type != "cuda":
        return "sdpa"
    if xformers_available() and native_lowering("xformers", biases, ctx):
        return "xformers"
    if q.shape[2] > 1 and native_lowering("flex", biases) and flex_compile_enabled():
        return "flex"
    return "sdpa"


@register_backend("auto")
def _auto(q, k, v, ctx, biases, scale, return_probs, *, transform=None, normaliser=None):
    hooks = {} if transform is None and normaliser is None else {"transform": transform, "normaliser": normaliser}
    chosen = pick_backend(q, ctx, biases, return_probs=return_probs, transform=transform, normaliser=normaliser)
    return BACKENDS[chosen](q, k, v, ctx, biases, scale, return_probs, **hooks)
