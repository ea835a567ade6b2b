"""The one interface every positional encoding implements (:class:`PositionalEncoding`).

Axis letters used in shape comments throughout pezoo:
    b batch, s sequence, i query positions, j key positions, d model width,
    h heads, e head dim (q/k), f value head dim, p histogram bins, c cursors.

A positional encoding (PE) can act at nine points. Every hook defaults to the identity,
so an encoding implements only what it changes:

    positions(b, s)            which integer position each token gets (randomized PE)
    padded_positions(lens, w)  the same for right-padded rows of several lengths
    embed(x, pos)              token embeddings, before layer 0        (sin/cos, learned APE)
    embed_tokens(x, ids, ctx)  the same, indexed by the token ids      (Abacus)
    observe(layer, x, ctx)     read the residual stream before a layer (PRISM's gates, FoX's)
    qk(layer, q, k, ctx)       rotate or extend per-head q/k           (RoPE, PRISM)
    bias(layer, q, k, ctx)     structured additive bias / mask          (ALiBi, Hard-ALiBi, PRF)
    score_transform(layer, ctx)  every head's scores and biases -> scores (DAPE)
    normaliser(layer, ctx)     the weights from a row of scores, in place of softmax (stick-breaking)

The last two change attention itself, and not every backend can express them: an encoding
that uses one says which backends can run it (:meth:`PositionalEncoding.attention_backends`;
see :mod:`pezoo.scores`).

An encoding may hold others and pass hooks on to them: a wrapper (``randomized:rope``,
:class:`pezoo.wrapper.Wrapper`) or a combination (``abacus+fire``, :class:`pezoo.Combined`).
Such a hook implementation is marked :func:`forwards`, and :meth:`PositionalEncoding.delegates`
names the encodings it passes to, so what a built encoding does is read off it, not off its
class: :func:`acts_through` (``dape:alibi`` acts through ``bias``, ALiBi's, and
``score_transform``, its own; not through ``qk``, which it only passes on).

Positions are explicit integer tensors. Incremental decoding works through
``ctx.state``: a dict the caller keeps alive across calls for one sequence batch, in
which an encoding may keep whatever recurrent state it needs (PRISM keeps its GRU hidden
state and histograms there). For a full forward pass the dict is fresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from pezoo.biases import AttentionBias
from pezoo.context import AttentionContext, check_length
from pezoo.scores import Normaliser, ScoreTransform

HOOKS = (
    "positions",
    "padded_positions",
    "embed",
    "embed_tokens",
    "observe",
    "qk",
    "bias",
    "score_transform",
    "normaliser",
)
"""The interface's hooks, in the order a forward pass reaches them (module docstring)."""

_Method = TypeVar("_Method", bound=Callable[..., Any])
_FORWARDS = "__pezoo_forwards__"


def forwards(method: _Method) -> _Method:
    """Mark a hook implementation that does no work of its own: it passes the call on to
    the encodings the instance holds (:meth:`PositionalEncoding.delegates`) and gathers their
    answers, as a wrapper's forward and a combination's hooks do. :func:`acts_through` then
    looks past it to them."""
    setattr(method, _FORWARDS, True)
    return method


def defines_hook(cls: type, hook: str) -> bool:
    """Whether class ``cls`` does work of its own in ``hook``: it implements the hook, with
    neither the interface's identity nor an implementation marked :func:`forwards`. Read off
    the class alone, so it answers for a registered name before anything is built; a wrapper
    class with a fixed inner encoding (the registered ``dape``, DAPE over KERPLE-log) answers
    for its own work only: ask :func:`acts_through` of a built one for the rest."""
    method = getattr(cls, hook, None)
    if method is None or method is getattr(PositionalEncoding, hook):
        return False
    return not getattr(method, _FORWARDS, False)


def acts_through(encoding: PositionalEncoding, hook: str) -> bool:
    """Whether the built ``encoding`` does anything in ``hook``: its class does work there
    (:func:`defines_hook`), or the hook is passed on (:func:`forwards`) to an encoding that
    does (:meth:`PositionalEncoding.delegates`). ``randomized:rope`` acts through
    ``positions`` (its own) and ``qk`` (RoPE's); ``alibi+kerple_log`` through ``bias`` alone."""
    cls = type(encoding)
    if defines_hook(cls, hook):
        return True
    if not getattr(getattr(cls, hook, None), _FORWARDS, False):
        return False
    return any(acts_through(inner, hook) for inner in encoding.delegates())


def to_device(drawn: Tensor, device: torch.device | str) -> Tensor:
    """``drawn``, values an encoding drew on the host (random positions, an offset), on
    ``device``. To a GPU the copy goes from pinned memory without waiting on the stream
    (``non_blocking``): a plain copy from pageable memory synchronises, so a training step
    would wait for every kernel queued before it, each step. Except while the current stream
    captures a CUDA graph: there the plain copy fails the capture, which is what should
    happen, where an asynchronous one would freeze this one draw into every replay."""
    device = torch.device(device)
    if device.type != "cuda" or drawn.device.type != "cpu" or torch.cuda.is_current_stream_capturing():
        return drawn.to(device)
    return drawn.pin_memory().to(device, non_blocking=True)


def check_lengths(lengths: Tensor, width: int) -> None:
    """ValueError unless ``lengths`` is a 1-D integer tensor of row lengths in ``[0, width]``
    (the real tokens of right-padded rows ``width`` tokens wide)."""
    integer = isinstance(lengths, Tensor) and not (
        lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool
    )
    if not integer or lengths.ndim != 1:
        raise ValueError(f"lengths must be a 1-D integer tensor, one length per row; got {_describe(lengths)}")
    if lengths.numel():
        low, high = (int(v) for v in torch.stack(torch.aminmax(lengths)).tolist())  # one transfer, not two
        if low < 0 or high > width:
            raise ValueError(f"row lengths must lie in [0, {width}] for rows {width} tokens wide; got {low}..{high}")


def _describe(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


class PositionalEncoding(nn.Module):
    """Base class of every pezoo encoding. All hooks are the identity by default.

    Subclasses set ``name`` (the registry key) and override the hooks they need. Hooks
    work on plain tensors, so an encoding can be used inside any attention code:

    >>> import torch, pezoo
    >>> rope = pezoo.create("rope", head_dim=16)
    >>> q = k = torch.randn(2, 4, 10, 16)                       # (b, h, s, e)
    >>> pos = torch.arange(10)
    >>> ctx = pezoo.AttentionContext(q_pos=pos[None], k_pos=pos[None])
    >>> q2, k2 = rope.qk(0, q, k, ctx)
    >>> q2.shape
    torch.Size([2, 4, 10, 16])

    Class attributes:
        name: registry key.
        uses_positions: whether the encoding reads ``pos`` at all (randomized PE wraps
            only those that do).
        max_position: largest position supported, or None for unbounded.
    """

    name: str = ""  # per class; a wrapper (Combined, Randomized) sets its own per instance
    uses_positions: bool = True
    max_position: int | None = None

    # -- positions -----------------------------------------------------------------
    def positions(self, batch: int, length: int, device: torch.device | str = "cpu") -> Tensor:
        """Integer positions for a sequence of ``length`` tokens: (b|1, s) long.

        Plain encodings use 0..s-1 shared by the batch. Randomized PE overrides this
        during training (sorted random subset of a larger range).
        """
        check_length(self.name or type(self).__name__, length)
        if self.max_position is not None and length > self.max_position:
            raise ValueError(
                f"{type(self).__name__} supports positions < {self.max_position}, got a sequence of {length} tokens"
            )
        return torch.arange(length, device=device)[None]

    def padded_positions(self, lengths: Tensor, width: int, device: torch.device | str = "cpu") -> Tensor:
        """Positions for a batch of right-padded rows: row i holds ``lengths[i]`` real
        tokens, then padding, ``width`` tokens in all. (b|1, width) long.

        Every row's real tokens get what :meth:`positions` would give a sequence of
        their own length; what the padding gets is unspecified (no real token of a
        causal model sees it). By default that is :meth:`positions` for the whole width,
        since a plain encoding's positions do not depend on the length. Randomized PE
        overrides it: a sequence's random positions depend on how many tokens it has.

        Raises:
            ValueError: ``lengths`` is not a 1-D integer tensor of values in ``[0, width]``.
        """
        check_lengths(lengths, width)
        return self.positions(int(lengths.shape[0]), width, device)

    # -- hooks ---------------------------------------------------------------------
    def embed(self, x: Tensor, pos: Tensor) -> Tensor:
        """Token embeddings (b, s, d) and positions (b|1, s) -> embeddings (b, s, d)."""
        return x

    def embed_tokens(self, x: Tensor, tokens: Tensor, ctx: AttentionContext) -> Tensor:
        """Embeddings (b, s, d) after :meth:`embed`, and the token ids (b, s) they embed ->
        embeddings (b, s, d): for encodings whose positions come from the content (Abacus
        numbers each digit within its number). ``tokens`` are the current tokens only;
        an encoding that needs earlier ones keeps what it needs in ``ctx.state``."""
        return x

    def observe(self, layer: int, x: Tensor, ctx: AttentionContext) -> None:
        """Read the residual stream (b, s, d) entering ``layer``; no return value."""

    def qk(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor]:
        """Transform the *new* queries (b, h, i, e) and keys (b, h, i, e) of ``layer``.

        Keys are transformed once, before they enter a KV cache. The output head dim
        may be larger than e (PRISM concatenates position streams); the attention scale
        stays the caller's 1/sqrt(e), and an encoding that widens q/k records e in
        ``ctx.head_dim`` (if unset) so that ``attend``'s default scale is that one.
        """
        return q, k

    def bias(self, layer: int, q: Tensor, k: Tensor, ctx: AttentionContext) -> list[AttentionBias]:
        """Structured biases for ``layer`` given the (transformed) q (b,h,i,e), k (b,h,j,e)."""
        return []

    def score_transform(self, layer: int, ctx: AttentionContext) -> ScoreTransform | None:
        """A function of every head's scores and summed biases at each (i, j) pair that
        replaces ``scores + biases`` in ``layer`` (DAPE's MLP), applied before the masks; or
        None (the default: scores plus biases). See :mod:`pezoo.scores`."""
        return None

    def normaliser(self, layer: int, ctx: AttentionContext) -> Normaliser | None:
        """A row-wise function of the scores that replaces softmax in ``layer`` (stick-breaking
        attention), or None (the default: softmax). See :mod:`pezoo.scores`."""
        return None

    def attention_backends(self) -> tuple[str, ...] | None:
        """The attention backends that can run this encoding (``auto`` besides, which picks one
        of them), or None: every backend (the default). An encoding whose ``score_transform`` or
        ``normaliser`` only some backends take returns theirs (:func:`pezoo.scores.hook_backends`),
        so a model, the conformance kit or a benchmark can choose before running it."""
        return None

    def delegates(self) -> tuple[PositionalEncoding, ...]:
        """The encodings this one passes hooks on to (its hooks marked :func:`forwards`): a
        wrapper's ``inner``, a combination's parts; () for an encoding that holds none (the
        default). :func:`acts_through` reads them."""
        return ()

    def qk_head_dims(self, head_dim: int, n_layers: int) -> list[int | None]:
        """The per-head width of q and k this encoding takes at each of ``n_layers`` layers, in
        a model whose heads are ``head_dim`` wide; None at a layer that takes any width. The
        default: ``head_dim`` wherever it transforms q and k itself (RoPE and its kin are sized
        by the width they were built for), else what the encodings it holds say
        (:meth:`delegates`), else None (a bias, an embedding, NoPE). An encoding whose layers
        differ says so (``hybrid``'s G layers with ``global_head_dim``). A model whose
        projections split q/k otherwise cannot run it: pezoo.hf and the harness compare the two
        before anything runs."""
        own = head_dim if defines_hook(type(self), "qk") else None
        answers = [inner.qk_head_dims(head_dim, n_layers) for inner in self.delegates()]
        return [next((a[layer] for a in answers if a[layer] is not None), own) for layer in range(n_layers)]

    # -- training extras -------------------------------------------------------------
    def optimizer_groups(self) -> list[dict[str, Any]]:
        """Parameters that need their own optimiser settings, as ``torch.optim`` parameter
        groups (PRISM's α scales, say); the rest belong in the caller's default group.
        None by default."""
        return []

    def regularisation(self) -> Tensor:
        """A loss term to add during training (PRISM's optional Frobenius penalty); a
        zero scalar by default."""
        return torch.zeros(())

    # -- evaluation ------------------------------------------------------------------
    @property
    def random_at_eval(self) -> bool:
        """Whether eval-mode positions are random draws (randomized PE, as its paper
        evaluates it): an evaluation is then reproducible only under :meth:`seeded`.
        False by default."""
        return False

    @contextmanager
    def seeded(self, seed: int) -> Iterator[torch.Generator | None]:
        """Inside the block, the encoding's random draws come from a generator seeded with
        ``seed``, leaving torch's global RNG alone. An encoding that draws nothing yields
        None and the block changes nothing, so evaluation code can wrap any encoding."""
        yield None

    _generator: torch.Generator | None = None
    """Where this encoding's random draws come from (a CPU generator), or None: torch's global
    RNG. Set for a block by :meth:`drawing_from` or :meth:`seeded`."""

    @contextmanager
    def drawing_from(self, generator: torch.Generator | None) -> Iterator[None]:
        """Inside the block, every random draw of this encoding and of the encodings it holds
        (a wrapper's inner one, a combination's parts) comes from ``generator``, a CPU
        ``torch.Generator`` whose stream the draws continue, instead of torch's global RNG
        (None: from the global RNG). Draws an encoding makes for a device tensor are made on
        the CPU and moved, so a run draws the same numbers on any device type.

        A training run draws from a generator of its own: runs trained side by side in one
        process (threads sharing torch's one global RNG) then draw exactly what each draws
        alone."""
        parts = [m for m in self.modules() if isinstance(m, PositionalEncoding)]
        previous = [m._generator for m in parts]
        for m in parts:
            m._generator = generator
        try:
            yield
        finally:
            for m, g in zip(parts, previous, strict=True):
                m._generator = g

    def plan_draws(self, device: torch.device | str = "cpu") -> dict[Any, Tensor]:
        """The random values a training pass of this encoding and of the encodings it holds
        draws once per pass (Abacus's and position coupling's offset), drawn now from where
        :meth:`drawing_from` points, keyed as the pass keeps them in ``ctx.state``; {} in eval
        mode or for an encoding that draws nothing in its pass.

        A caller that records a pass (a CUDA graph replays kernels, never the host's draws)
        plans them outside it and hands them in (``Backbone.forward(draws=...)``); a pass
        handed its draws makes none, and sees what it would have drawn itself from the same
        state. Randomized PE's positions are planned the same way, by :meth:`positions`."""
        draws: dict[Any, Tensor] = {}
        for m in self.modules():
            if isinstance(m, PositionalEncoding):
                draws.update(m.own_draws(torch.device(device)))
        return draws

    def own_draws(self, device: torch.device) -> dict[Any, Tensor]:
        """This encoding's share of :meth:`plan_draws` (none by default): an encoding that
        draws in its pass returns, in training mode, what the pass would draw, under the
        ``ctx.state`` keys where it looks for it before drawing."""
        return {}

    def ctx_key(self, name: str) -> tuple[str, int]:
        """A key for this instance's entries in ``ctx.scratch`` and ``ctx.state``.

        One context is shared by every layer of a forward call, so two instances in one
        model (RoPE with one base for local layers and another for global ones, two T5
        tables) would read each other's memo under a fixed key; keyed by instance, each
        reads its own. (Valid while the instance lives, which is as long as any context
        that holds its entries is used.)
        """
        return (name, id(self))

    def extra_repr(self) -> str:
        return self.name
