"""The one backbone every encoding is trained in: a decoder-only pre-LN Transformer.

Axis letters: b batch, s sequence (new tokens of this call), d model width, v vocab.

The encoding is injected (``PositionalEncoding`` instance) and is the only thing that
differs between two runs of a comparison. Incremental decoding keeps everything it
needs in one ``state`` dict: planned positions, per-layer KV cache, and whatever
recurrent state the encoding keeps there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.config.backbone import BackboneConfig
from pezoo import AttentionContext, PositionalEncoding, SelfAttention, runnable_backend


class Block(nn.Module):
    """Pre-LN block: x + Attn(LN(x)), then x + MLP(LN(x)) with a GELU MLP."""

    def __init__(self, cfg: BackboneConfig, layer: int, backend: str | None = None) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.n_heads, layer=layer, backend=backend or cfg.backend)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        d_ff = cfg.d_ff or 4 * cfg.d_model
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, d_ff), nn.GELU(), nn.Linear(d_ff, cfg.d_model))

    def forward(
        self,
        x: Tensor,
        pe: PositionalEncoding,
        ctx: AttentionContext,
        return_probs: bool,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``rows``: the flat (b·s) indices of the tokens whose MLP is computed; the
        others (padding) pass it by unchanged. None: every token."""
        a, probs = self.attn(self.ln_attn(x), pe, ctx, return_probs=return_probs)
        x = x + a  # (b, s, d)
        if rows is None:
            return x + self.mlp(self.ln_mlp(x)), probs
        flat = x.reshape(-1, x.shape[-1])  # (b·s, d)
        kept = self.mlp(self.ln_mlp(flat.index_select(0, rows)))  # (r, d); bf16/fp16 under autocast
        return flat.index_add(0, rows, kept.to(flat.dtype)).view_as(x), probs  # the residual stays float32


class Backbone(nn.Module):
    """Decoder-only Transformer with an injected PE, its output layer tied to the input
    embedding (``BackboneConfig.head``; or a layer of its own).

    Args:
        cfg: the backbone shape.
        pe: the positional encoding (built for ``cfg``'s dims).
    """

    init_rng_state: Tensor | None = None
    """torch's global CPU RNG state right after ``harness.training.train.build_model``
    initialised this model; the run's training draws continue from it."""

    def __init__(self, cfg: BackboneConfig, pe: PositionalEncoding) -> None:
        super().__init__()
        self.cfg, self.pe = cfg, pe
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # an encoding whose score transform or normaliser the configured backend cannot run
        # (stick-breaking: eager only) runs on one it names (pezoo.runnable_backend)
        backend = runnable_backend(cfg.backend, pe)
        self.backend = backend
        """The attention backend the model runs: ``cfg.backend``, or the one its encoding names."""
        self.blocks = nn.ModuleList(Block(cfg, layer, backend) for layer in range(cfg.n_layers))
        self.ln_out = nn.LayerNorm(cfg.d_model)
        # untied: an output layer of its own, initialised as every linear layer (a tied
        # model's draws are unchanged: this module is made, and drawn for, only untied)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False) if cfg.head == "untied" else None
        self.apply(self._init)
        # Tied embeddings as in Vaswani et al.: weights ~ N(0, 1/d), inputs scaled by
        # sqrt(d), so input embeddings have unit scale (comparable to a sin/cos APE) and
        # initial logits are O(1).
        nn.init.normal_(self.embed.weight, std=cfg.d_model**-0.5)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def start_state(
        self,
        batch: int,
        max_length: int,
        device: torch.device | str | None = None,
        *,
        positions: Tensor | None = None,
    ) -> dict[str, Any]:
        """A fresh decoding state whose positions are planned for ``max_length`` tokens:
        drawn here from the encoding, or the given ``positions`` (b|1, >= max_length)
        (planned by the caller, e.g. once per evaluated example)."""
        device = device or self.embed.weight.device
        if positions is None:
            positions = self.pe.positions(batch, max_length, device)
        elif positions.shape[-1] < max_length:
            raise ValueError(f"positions planned for {positions.shape[-1]} tokens cannot hold {max_length}")
        return {"positions": positions, "length": 0}

    def forward(
        self,
        tokens: Tensor,
        *,
        state: dict[str, Any] | None = None,
        scale_hint: Tensor | None = None,
        return_probs: bool = False,
        keep: Tensor | None = None,
        positions: Tensor | None = None,
        draws: Mapping[Any, Tensor] | None = None,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Logits for ``tokens`` (b, s) -> (b, s, v).

        With ``state`` (from :meth:`start_state`), ``tokens`` continue the sequence held
        in it and the state is updated (KV cache, encoding state); without, this is one
        full forward pass. ``return_probs`` (eager backend) also returns the attention
        probabilities of every layer.

        ``keep`` (b, s) bool, for training on right-padded batches (causal backbone, full
        pass): the tokens whose logits are used. Each row's kept tokens must come before
        its others; the others (padding, which no kept token attends to) skip the MLPs,
        the bulk of a step's arithmetic, and their logits are meaningless. The kept
        tokens' logits and every gradient are those of the pass without ``keep``, up to
        float rounding (a padded row's share of a matmul is not computed).

        ``positions`` (b|1, >= s), for a full pass: the positions planned for it (by
        default drawn here from the encoding), e.g. one draw for a whole batch sliced
        for a group of its rows, so the rows see what one pass would give them.

        ``draws``, for a full pass: what the encoding would draw in it, planned by the caller
        (``pe.plan_draws``; by default drawn in the pass): a pass recorded as a CUDA graph
        takes them as inputs, and groups of a batch's rows share one batch's draws.
        """
        b, s = tokens.shape
        rows = self._kept_rows(keep, tokens, state)
        state_kept = state is not None
        if state is None:
            if positions is None:
                positions = self.pe.positions(b, s, tokens.device)
            elif positions.ndim != 2 or positions.shape[0] not in (1, b) or positions.shape[1] < s:
                raise ValueError(
                    f"positions must be planned for {b} or 1 row(s) of at least {s} tokens, "
                    f"got {tuple(positions.shape)}"
                )
            state = {"positions": positions, "length": 0, **(draws or {})}
        elif positions is not None or draws is not None:
            raise ValueError("positions and draws are for a full pass: a decoding state holds its own (start_state)")
        start = state["length"]
        positions = state["positions"]  # (b|1, planned length)
        if positions.shape[-1] < start + s:
            raise ValueError(
                f"the decoding state was planned for {positions.shape[-1]} tokens but {start + s} "
                "were fed; start it with start_state(batch, max_length) large enough"
            )
        ctx = AttentionContext(
            q_pos=positions[:, start : start + s],
            k_pos=positions[:, : start + s],
            causal=self.cfg.causal,
            state=state,
            scale_hint=scale_hint,
            state_kept=state_kept,
        )
        x = self.pe.embed(self.embed(tokens) * self.cfg.d_model**0.5, ctx.q_pos)  # (b, s, d)
        x = self.pe.embed_tokens(x, tokens, ctx)
        all_probs = []
        for layer, block in enumerate(self.blocks):
            self.pe.observe(layer, x, ctx)
            x, probs = block(x, self.pe, ctx, return_probs, rows)
            all_probs.append(probs)
        state["length"] = start + s
        out = self.embed.weight if self.head is None else self.head.weight  # tied, or its own: (v, d)
        logits = F.linear(self.ln_out(x), out)  # (b, s, v)
        return (logits, all_probs) if return_probs else logits

    def _kept_rows(self, keep: Tensor | None, tokens: Tensor, state: dict[str, Any] | None) -> Tensor | None:
        """The flat indices of ``keep``'s tokens, or None when every token is kept."""
        if keep is None:
            return None
        if keep.shape != tokens.shape or keep.dtype != torch.bool:
            raise ValueError(
                f"keep must be a bool tensor shaped as tokens {tuple(tokens.shape)}, got {keep.dtype} "
                f"{tuple(keep.shape)}"
            )
        if not self.cfg.causal or state is not None:
            raise ValueError(
                "keep is for a causal backbone's full pass: an encoder's tokens attend to the padding, "
                "and a decoding state caches every token"
            )
        if bool((keep[:, 1:] & ~keep[:, :-1]).any()):
            raise ValueError(
                "keep must keep a prefix of each row (right padding): a kept token after a dropped "
                "one would attend to it"
            )
        flat = keep.reshape(-1)
        if bool(flat.all()):
            return None
        return flat.nonzero().squeeze(1)

    def n_params(self) -> dict[str, int]:
        """Parameter counts: total, and the encoding's own."""
        pe = sum(p.numel() for p in self.pe.parameters())
        return {"total": sum(p.numel() for p in self.parameters()), "pe": pe}
