"""Attention backends that lower structured biases without an (i, j) tensor: ``flex``
(:mod:`pezoo.backends.flex`), ``xformers`` (:mod:`pezoo.backends.xformers`), and ``auto``
(:mod:`pezoo.backends.auto`), which picks one. Importing this package registers them in
:data:`pezoo.attention.BACKENDS` (``import pezoo`` does).

How each structured bias is lowered:

    bias          flex                                     xformers
    ------------  ---------------------------------------  -----------------------------------------
    causal        mask_mod ``kv <= q + n_cached`` + blocks  LowerTriangularFromBottomRightMask
    WindowMask    mask_mod + a block mask built from the    heads grouped by window, one call per group
                  per-block position ranges (no (i, j)      with LowerTriangularFromBottomRight-
                  tensor is ever built)                     LocalAttentionMask(window) (needs contiguous
                                                            positions; otherwise dense)
    BlockMask     mask_mod ``⌊pos_j/l⌋ >= ⌊pos_i/l⌋ - 1`` + a   dense tensor bias
                  block mask from the per-block position
                  ranges (no (i, j) tensor)
    LinearBias    score_mod ``-slope_h |pos_i - pos_j|``    dense tensor bias
    RelativeFunctionBias                                   dense tensor bias
                  score_mod calling ``fn(pos_i, pos_j, h)``
                  on scalars (no (i, j) tensor; KERPLE,
                  FIRE, T5's per-distance table)
    DenseBias     score_mod reading the tensor              dense tensor bias
    DifferenceBias  score_mod ``q_values[b, h, i] -           dense tensor bias
                  k_values[b, h, j]`` (no (i, j) tensor;
                  FoX's ``c_i - c_j``)
    key padding   mask_mod ``kpm[b, kv]``                   dense tensor bias
    other         ``materialize()`` then as DenseBias       dense tensor bias

Semantics shared with ``eager``: scores are ``scale * <q, k> + biases``. One difference:
a query row whose every key is masked (a query at a padding position) gets output 0 from
flex, whereas eager/sdpa unmask such rows; those outputs are meaningless either way and
callers ignore them.

Each backend's own rules (flex's compilation and its CPU workarounds, xformers' grouping,
``auto``'s choice) are in its module's docstring.
"""

from pezoo.backends.auto import native_lowering, pick_backend
from pezoo.backends.flex import (
    FLEX_BLOCK_SIZE,
    flex_block_mask,
    flex_compile,
    flex_compile_enabled,
    set_flex_compile,
)
from pezoo.backends.xformers import xformers_available, xformers_plan

__all__ = [
    "FLEX_BLOCK_SIZE",
    "flex_block_mask",
    "flex_compile",
    "flex_compile_enabled",
    "native_lowering",
    "pick_backend",
    "set_flex_compile",
    "xformers_available",
    "xformers_plan",
]
