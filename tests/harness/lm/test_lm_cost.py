"""benchmarks/lm_cost.py's baseline: a hand-written decoder is a fair yardstick for the ``lm``
preset's step only if it starts where the backbone starts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from harness.config import preset_config
from harness.training.train import build_model
from tests.benchmark_scripts import load


def _first_loss(model: torch.nn.Module, tokens: torch.Tensor) -> float:
    logits = model(tokens)[:, :-1]  # each position predicts the next byte
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()


def test_the_hand_written_decoder_starts_at_the_backbone_s_loss():
    """The untrained baseline's next-byte loss is the backbone's (both ~11: tied embeddings
    make each position predict its own byte at first). Its own initialisation once gave
    logits of scale ~d, a loss near 127 and gradients near 1e-31, whose subnormal arithmetic
    made its backward pass 40x the backbone's on an AVX-512 CPU."""
    cfg = preset_config("lm", pe="nope", task="lm_en", seed=0)
    b = cfg.backbone
    torch.manual_seed(0)
    tokens = torch.randint(256, (2, 64))
    hand = load("lm_cost").HandDecoder(b.vocab_size, b.d_model, b.n_layers, b.n_heads)
    with torch.no_grad():
        ours, theirs = _first_loss(build_model(cfg, torch.device("cpu")), tokens), _first_loss(hand, tokens)
    assert abs(theirs - ours) < 0.5, (ours, theirs)
