"""The conformance kit: the battery every positional encoding must pass.

Usable by third-party packages in their own tests; it needs only the public interface,
a factory ``() -> PositionalEncoding`` and the model dims the encoding was built for:

>>> import pezoo
>>> from pezoo.testing import check_encoding
>>> dims = pezoo.ModelDims(d_model=32, n_heads=4, n_layers=2)
>>> check_encoding(lambda: pezoo.create("rope", dims=dims), dims)

Every check runs the encoding inside :class:`KitModel`, a tiny pre-LN decoder built from
:class:`pezoo.SelfAttention`, or calls its hooks on plain tensors. Positions are drawn
once through ``pe.positions()`` and then passed explicitly, so encodings that randomize
positions (randomized PE) are compared against themselves at equal positions.

Axis letters: b batch, s sequence, d model width, h heads, e head dim, v vocab.

Checks (``CHECKS``, run in this order by :func:`check_encoding`):
    hook_shapes            hooks on plain tensors at several lengths: each returns a tensor
                           (qk a pair) of the right shape, dtype and device, leaves its inputs
                           unchanged; sorted integer positions; biases materialise to
                           (b, h, i, j) in the dtype asked for; a qk that widens q/k records
                           the head dim in ctx.head_dim; attention_backends() names
                           registered backends, qk_head_dims() one width per layer
    no_future_leakage      changing tokens at t.. leaves outputs before t unchanged
    backend_agreement      every usable backend equals eager (fp32): forward at the
                           length and, with key padding, at 3× it; parameter gradients
                           (the backends the encoding runs on: ``attention_backends``)
    incremental_decoding   a prompt then one token at a time, with a KV cache in
                           ``ctx.state``, equals one full forward pass
    unsupported_backends   an encoding that runs on some backends only (a score transform
                           or normaliser) is refused by the others with an error naming
                           those it runs on, and ``auto`` runs it
    state_dict_round_trip  a fresh instance loaded from a state dict (also through
                           ``torch.save``) computes the same outputs
    half_precision         the model moved with ``.half()`` / ``.bfloat16()``: eager and
                           sdpa forward return that dtype, finite, close to fp32 (loose)
    float64                the model moved with ``.double()``: float64 outputs close to fp32
    copy_and_pickle        ``copy.deepcopy`` and a pickle round trip of the model compute
                           the same outputs as the original
    device_move            no module holds a tensor outside its parameters and buffers
                           (``.to(device)`` would leave it behind), and after
                           ``.to("meta")`` every parameter and buffer has moved
    deterministic          the same seed gives bit-identical outputs (training mode); eval
                           mode gives the same whatever the global RNG state (under
                           ``seeded`` where ``random_at_eval`` says evaluation draws)
    extrapolation          a forward pass at ``extrapolation_factor`` × the length
    gradients_finite       a training step gives finite gradients for the encoding
    empty_inputs           no tokens, or no sequences: an empty output of the right shape
                           (training and evaluation mode)

Not a check (it fails nothing): :func:`graph_breaks` reports how many graph breaks
``torch.compile`` meets in the kit model's forward pass (``torch._dynamo.explain``).

kit.py      KitModel, KitConfig, ConformanceError, and how a check builds the model and inputs
checks.py   the checks, CHECKS and check_encoding
hooks.py    the hook_shapes check (hooks on plain tensors, and the encoding's declarations)
compile.py  graph_breaks and its CompileReport
"""

from pezoo.testing.checks import (
    CHECKS,
    LOW_PRECISION_TOLERANCE,
    check_backend_agreement,
    check_copy_and_pickle,
    check_deterministic,
    check_device_move,
    check_empty_inputs,
    check_encoding,
    check_extrapolation,
    check_float64,
    check_gradients_finite,
    check_half_precision,
    check_hook_shapes,
    check_incremental_decoding,
    check_meta_init,
    check_no_future_leakage,
    check_state_dict_round_trip,
    check_unsupported_backends,
)
from pezoo.testing.compile import CompileReport, graph_breaks
from pezoo.testing.kit import ConformanceError, Factory, KitConfig, KitModel, usable_backends

__all__ = [
    "CHECKS",
    "LOW_PRECISION_TOLERANCE",
    "CompileReport",
    "ConformanceError",
    "Factory",
    "KitConfig",
    "KitModel",
    "check_backend_agreement",
    "check_copy_and_pickle",
    "check_deterministic",
    "check_device_move",
    "check_empty_inputs",
    "check_encoding",
    "check_extrapolation",
    "check_float64",
    "check_gradients_finite",
    "check_half_precision",
    "check_hook_shapes",
    "check_incremental_decoding",
    "check_meta_init",
    "check_no_future_leakage",
    "check_state_dict_round_trip",
    "check_unsupported_backends",
    "graph_breaks",
    "usable_backends",
]
