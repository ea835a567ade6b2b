"""Your own model on the LM track: a Hugging Face causal LM with a pezoo encoding
(``pezoo.hf.use_encoding``), scored in bits per byte on the same held-out regions, at the
same lengths (in bytes of text), in both modes.

A length S is S bytes of held-out text: the window's text is tokenized with the model's own
tokenizer (or read as bytes when the folder has none and the model has at least 257 token
ids: a byte-level model, ``BOS`` = 256), read from the tokenizer's start token, and every
token's negative log-likelihood is summed; bits per byte divide by the bytes the scored
tokens cover, so models with different tokenizers are comparable. In the tail mode the
tokens that start within the window's last ``tail`` bytes are scored. Forward passes run
``chunk`` tokens at a time through the model's KV cache.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from harness.lm.corpora import Corpus, split
from harness.lm.data import heldout_regions
from harness.lm.evaluate import LengthScore
from harness.lm.tasks import BOS

__all__ = ["hf_scores"]


def _tokenizer(model_dir: Path) -> Any | None:
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
    if not any((model_dir / n).exists() for n in names):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _encode(tokenizer: Any | None, window: bytes, scored_from: int, vocab: int) -> tuple[list[int], int, int]:
    """(ids from the start token, index of the first scored target among ids[1:], bytes the scored tokens cover)."""
    if tokenizer is None:
        if vocab <= BOS:
            raise ValueError(f"the model folder has no tokenizer and {vocab} token ids: not a byte-level model")
        return [BOS, *window], scored_from, len(window) - scored_from
    text = window.decode("utf-8", errors="replace")
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError("the tokenizer has neither a BOS nor an EOS token to start a window with")
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    tail_char = len(window[:scored_from].decode("utf-8", errors="replace"))
    first = next((i for i, (a, _) in enumerate(enc["offset_mapping"]) if a >= tail_char), len(enc["input_ids"]))
    return [start, *enc["input_ids"]], first, len(text[tail_char:].encode())


@torch.no_grad()
def _nats(model: Any, ids: list[int], first: int, chunk: int, device: torch.device) -> float:
    tokens = torch.tensor([ids], device=device)  # (1, s)
    targets = tokens[:, 1:]
    total, past = 0.0, None
    inputs = tokens[:, :-1]
    # transformers 5.x names the cache ``cache`` (``past_key_values`` before, deprecated since)
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    for a in range(0, inputs.shape[1], chunk):
        b = min(inputs.shape[1], a + chunk)
        out = model(input_ids=inputs[:, a:b], use_cache=True, **{name: past})
        past = getattr(out, name)
        lo = max(a, first)
        if lo < b:
            logits = out.logits[0, lo - a :].float()  # (c', v)
            total += float(F.cross_entropy(logits, targets[0, lo:b], reduction="sum"))
    return total


def hf_scores(
    model_dir: str | Path,
    spec: str,
    corpus: Corpus,
    lengths: Sequence[int],
    *,
    regions: int = 4,
    tail: int = 1024,
    device: torch.device | None = None,
    chunk: int = 512,
) -> list[LengthScore]:
    """Bits-per-byte scores of the model in ``model_dir`` with encoding ``spec``, per (mode, length)."""
    from transformers import AutoModelForCausalLM

    import pezoo.hf

    lengths = sorted(lengths)
    if any(lengths[-1] % s for s in lengths):
        raise ValueError(f"every length must divide the longest, {lengths[-1]}: got {list(lengths)}")
    device = device or torch.device("cpu")
    folder = Path(model_dir)
    model = AutoModelForCausalLM.from_pretrained(folder)
    pezoo.hf.use_encoding(model, spec)
    model.to(device).eval()
    tokenizer = _tokenizer(folder)
    vocab = int(model.config.vocab_size)
    data = heldout_regions(split(corpus)[1], lengths[-1], regions)
    scores = []
    plan = [("windows", s) for s in lengths] + [("tail", s) for s in lengths if s >= tail]
    for mode, s in plan:
        nats, n_bytes = 0.0, 0
        for region in data:
            windows = [region[i : i + s] for i in range(0, len(region), s)] if mode == "windows" else [region[-s:]]
            for window in windows:
                ids, first, covered = _encode(tokenizer, window, 0 if mode == "windows" else s - tail, vocab)
                nats += _nats(model, ids, first, chunk, device)
                n_bytes += covered
        ok = math.isfinite(nats) and n_bytes > 0
        scores.append(
            LengthScore(mode, s, nats if ok else None, n_bytes if ok else 0, ok, "" if ok else "no finite loss")
        )
    return scores
