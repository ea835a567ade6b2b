"""PRISM's gates: a GRU over the residual stream emitting per-cursor reset / move
probabilities (Lee 2025, §5.0.5, §6.3), and the copy branch's causal attention (§5.0.3–5.0.4).

Axis letters: b batch, i new tokens, j all tokens so far, d model width, n cursors,
g GRU hidden width, e copy-attention width.
"""

from __future__ import annotations

import math
from typing import Literal, cast

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import orthogonal

__all__ = ["CopyAttention", "GateNet", "HiddenRegulariser", "compute_dtype", "householder_product_wy"]

HiddenRegulariser = Literal["orthogonal", "frobenius", "none"]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype PRISM computes probabilities in for a module or input of ``dtype``:
    float32 for fp16 / bf16 (a histogram's small masses and the sharpening's logs need
    it, and some kernels have no half version on CPU), float64 for float64."""
    return torch.promote_types(dtype, torch.float32)


def householder_product_wy(a: Tensor, tau: Tensor) -> Tensor:
    """``torch.linalg.householder_product(a, tau)`` for a tall (n, k) ``a``, in compact WY form.

    With unit lower-trapezoidal reflectors V = tril(a, -1) + I (n, k), the product
    H_1 ⋯ H_k of H_i = I - tau_i v_i v_iᵀ is ``I - V T Vᵀ`` with T upper triangular and
    ``T⁻¹ = diag(1/tau) + striu(VᵀV)`` (Schreiber & Van Loan 1989; Puglisi 1992). Its
    first k columns are ``I[:, :k] - V T V[:k]ᵀ``: one k×k triangular solve and two
    matmuls, whose autograd backward is a handful of ops, where torch's
    ``householder_product`` backward loops over the k reflectors (measured 20× slower
    forward + backward for PRISM's 300 × 100 W_hh on CPU; docs/performance.md).
    """
    n, k = a.shape[-2], a.shape[-1]
    eye = torch.eye(n, k, dtype=a.dtype, device=a.device)
    v = a.tril(diagonal=-1) + eye  # (n, k)
    t_inv = (v.mT @ v).triu(diagonal=1) + torch.diag_embed(1.0 / tau)  # (k, k) upper triangular
    t_v1 = torch.linalg.solve_triangular(t_inv, v[..., :k, :].mT, upper=True)  # T V[:k]ᵀ (k, k)
    return eye - v @ t_v1


try:  # torch's orthogonal parametrisation, reused so init, state-dict keys and behaviour stay torch's
    from torch.nn.utils.parametrizations import _OrthMaps, _Orthogonal
except ImportError:  # pragma: no cover - a torch without these internals uses the plain parametrisation
    _Orthogonal = _OrthMaps = None  # type: ignore[assignment,misc]

if _Orthogonal is not None:

    class CompactWYOrthogonal(_Orthogonal):
        """torch's Householder orthogonal map (tall matrices), the product in compact WY form."""

        def forward(self, X: Tensor) -> Tensor:
            dtype = X.dtype
            X = X.to(compute_dtype(dtype))  # fp16 / bf16: no triangular_solve kernel on CPU; solve in fp32
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = householder_product_wy(A, tau)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)  # signs, not differentiated (as torch)
            Q = self.base.to(Q.dtype) @ Q if hasattr(self, "base") else Q
            return Q.to(dtype)


def _orthogonal_fast(module: nn.Module, name: str) -> None:
    """``torch.nn.utils.parametrizations.orthogonal(module, name)``: the same parametrisation,
    initialisation and state-dict keys, with the Householder product of a tall weight computed
    by :func:`householder_product_wy`. Anything else goes to torch's own function."""
    weight = getattr(module, name)
    if _Orthogonal is None or weight.size(-2) <= weight.size(-1) or weight.is_complex():
        orthogonal(module, name)  # torch picks matrix_exp for square weights
        return
    orth = CompactWYOrthogonal(weight, _OrthMaps.householder, use_trivialization=True)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    if weight.is_meta and getattr(orth, "base", None) is None:
        # On the meta device torch's right_inverse cannot run (no QR there) and is skipped, which
        # leaves the trivialisation's base unset: give it its (n, n) shape so the state dict has
        # the same keys as a real build and load_state_dict fills it after to_empty.
        n = max(weight.shape[-2:])
        orth.base = torch.empty((*weight.shape[:-2], n, n), dtype=weight.dtype, device=weight.device)


_W_HH = "weight_hh_l0"  # the GRU's stacked hidden-to-hidden weight (3g, g)


class _GateGRU(nn.GRU):
    """nn.GRU whose ``reset_parameters`` keeps an orthogonal W_hh orthogonal.

    nn.GRU's own redraws every parameter uniformly, including the orthogonal
    parametrisation's ``original``, whose diagonal signs the parametrisation reads (they
    truncate to 0) and leaves its base (a buffer) as it was: after deferred
    initialisation (``meta``, ``to_empty``, ``reset_parameters``) W_hh was neither
    orthogonal nor initialised. Here W_hh is then set to a fresh orthogonal matrix through
    the parametrisation's right inverse, which rebuilds both.
    """

    def reset_parameters(self) -> None:
        super().reset_parameters()  # in the constructor: before any parametrisation, as nn.GRU
        if parametrize.is_parametrized(self, _W_HH):
            with torch.no_grad():
                weight = cast(Tensor, getattr(self, _W_HH))  # parametrised: computed on access
                setattr(self, _W_HH, nn.init.orthogonal_(torch.empty_like(weight)))  # through the right inverse


class _GateHead(nn.Linear):
    """The gate logits' linear layer: small random weights (std 1/hidden) and zero bias, so
    every cursor starts near the uniform prior. Its own ``reset_parameters`` so that
    deferred initialisation restores this init, not nn.Linear's."""

    def reset_parameters(self) -> None:
        super().reset_parameters()  # draws as nn.Linear does first, so seeded builds are unchanged
        nn.init.normal_(self.weight, std=1.0 / self.in_features)
        nn.init.zeros_(self.bias)


class GateNet(nn.Module):
    """GRU over (layer-normed) token states -> per cursor (p_reset, p_inc, p_dec, p_keep).

    ``p_reset = σ(l_0)`` and ``(p_inc, p_dec, p_keep) = softmax(l_1, l_2, l_3)`` (docs/prism.md, reading 3):
    an independent binary reset and a ternary move, as the (2×3)^t branch count of §5.1.1
    implies. The head starts with small random weights and zero bias, so every cursor
    begins near the uniform prior of the paper's Fig. 11 (reset 1/2, moves 1/3 each)
    while cursors still differ enough to break their symmetry.

    Args:
        d_model: width of the token states read.
        n_cursors: cursors driven (all heads, query and key sides).
        hidden: GRU hidden width (100 in the paper).
        regulariser: ``"orthogonal"``: ``torch.nn.utils.parametrizations.orthogonal`` on
            the GRU's stacked W_hh (3g × g; its columns are orthonormal); ``"frobenius"``:
            no constraint, :meth:`penalty` returns ‖W_hh‖_F² for the caller to weight
            (1e-3 in §6.3); ``"none"``.
    """

    def __init__(
        self, d_model: int, n_cursors: int, *, hidden: int = 100, regulariser: HiddenRegulariser = "orthogonal"
    ):
        super().__init__()
        if regulariser not in ("orthogonal", "frobenius", "none"):
            raise ValueError(f"unknown W_hh regulariser {regulariser!r}; valid: 'orthogonal', 'frobenius', 'none'")
        self.n_cursors, self.regulariser = n_cursors, regulariser
        self.gru = _GateGRU(d_model, hidden, batch_first=True)
        if regulariser == "orthogonal":
            _orthogonal_fast(self.gru, "weight_hh_l0")
        self.head = _GateHead(hidden, 4 * n_cursors)

    def forward(self, x: Tensor, hidden: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (b, i, d), GRU state (1, b, g) or None -> gates (b, i, n, 4), new state (1, b, g).

        Gate order on the last axis: reset, inc, dec, keep. No tokens (i = 0): no gates, the
        state as given (zeros, the GRU's own start, for None), where torch's GRU raises.
        """
        if x.shape[1] == 0:
            if hidden is None:
                hidden = x.new_zeros(1, x.shape[0], self.gru.hidden_size)
            return x.new_zeros(x.shape[0], 0, self.n_cursors, 4, dtype=compute_dtype(self.head.weight.dtype)), hidden
        y, hidden = self.gru(x, hidden)  # (b, i, g), (1, b, g)
        logits = self.head(y).unflatten(-1, (self.n_cursors, 4))  # (b, i, n, 4)
        logits = logits.to(compute_dtype(logits.dtype))
        reset = torch.sigmoid(logits[..., :1])
        move = torch.softmax(logits[..., 1:], dim=-1)
        return torch.cat([reset, move], dim=-1), hidden

    def __reduce__(self):
        """Pickle (and deep-copy) as constructor arguments + state dict: torch refuses to
        pickle a parametrised module (the orthogonal W_hh) any other way."""
        args = (self.gru.input_size, self.n_cursors, self.gru.hidden_size, self.regulariser)
        return _rebuild_gate_net, (args, self.state_dict(), self.training)

    def penalty(self) -> Tensor:
        """‖W_hh‖_F² (the §6.3 Frobenius regulariser before its weight)."""
        weight = cast(Tensor, self.gru.weight_hh_l0)  # parametrised: computed on access
        return weight.pow(2).sum()


def _rebuild_gate_net(args: tuple, state: dict[str, Tensor], training: bool) -> GateNet:
    d_model, n_cursors, hidden, regulariser = args
    net = GateNet(d_model, n_cursors, hidden=hidden, regulariser=regulariser)
    some = next(iter(state.values()))
    net.to(device=some.device, dtype=some.dtype).load_state_dict(state)
    return net.train(training)


class CopyAttention(nn.Module):
    """Causal attention over earlier tokens plus a null slot: p_copy of each copying cursor.

    For copying cursor n, token i attends to every token j <= i (its own included) and to
    a null slot; the null probability is p_no_copy. Queries, keys and the null logit are
    dedicated projections of the PRISM layer's (layer-normed) token states, one small
    single-head attention per copying cursor (docs/prism.md, reading 7). The null logit starts at
    ``null_bias`` so that, at initialisation, copying is rare.

    Args:
        d_model: token-state width.
        n_copy: copying cursors.
        dim: query/key width e per cursor.
        null_bias: initial bias of the null logit.
    """

    def __init__(self, d_model: int, n_copy: int, *, dim: int = 16, null_bias: float = 4.0):
        super().__init__()
        self.n_copy, self.dim = n_copy, dim
        self.query = nn.Linear(d_model, n_copy * dim, bias=False)
        self.key = nn.Linear(d_model, n_copy * dim, bias=False)
        self.null = nn.Linear(d_model, n_copy)
        for lin in (self.query, self.key, self.null):
            nn.init.normal_(lin.weight, std=0.02)
        nn.init.constant_(self.null.bias, null_bias)

    def forward(self, x: Tensor, keys_before: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """x (b, i, d) new tokens; keys of earlier calls (b, n, j0, e) or None.

        Returns:
            probs (b, n, i, j + 1) over all j = j0 + i tokens and, last, the null slot;
            keys (b, n, j, e) of all tokens so far (to keep for the next call).
        """
        b, i, _ = x.shape
        q = self.query(x).view(b, i, self.n_copy, self.dim).transpose(1, 2)  # (b, n, i, e)
        k = self.key(x).view(b, i, self.n_copy, self.dim).transpose(1, 2)
        if keys_before is not None:
            k = torch.cat([keys_before, k], dim=2)  # (b, n, j, e)
        j = k.shape[2]
        dtype = compute_dtype(q.dtype)
        scores = torch.einsum("bnie,bnje->bnij", q, k).to(dtype) / math.sqrt(self.dim)  # (b, n, i, j)
        t_query = torch.arange(i, device=x.device) + (j - i)  # absolute index of each new token
        allowed = torch.arange(j, device=x.device)[None, :] <= t_query[:, None]  # (i, j)
        scores = scores.masked_fill(~allowed, -torch.inf)
        null = self.null(x).to(dtype).transpose(1, 2)[..., None]  # (b, n, i, 1)
        return torch.softmax(torch.cat([scores, null], dim=-1), dim=-1), k
