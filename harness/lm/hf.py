"""Your own model on the LM track: a Hugging Face causal LM with a pezoo encoding
(``pezoo.hf.use_encoding``), scored in bits per byte on the same held-out regions, at the
same lengths (in bytes of text), in both modes.

A length S is S bytes of held-out text: the window's text is tokenized with the model's own
tokenizer, read from the tokenizer's start token, and every token's negative log-likelihood
is summed; bits per byte divide by the bytes the scored tokens cover, so models with
different tokenizers are comparable. A folder without a tokenizer is read as bytes (ids
0..255, ``BOS`` = 256) only when asked (``as_bytes``, ``--bytes``): a missing tokenizer is
more often a mistake than a byte-level model, and reading a 32k-token model's ids as bytes
gives numbers that mean nothing. In the tail mode the tokens that start within the
window's last ``tail`` bytes are scored. Forward passes run ``chunk`` tokens at a time
through the model's KV cache.

Everything that can be checked before loading is (:func:`check_hf`): the lengths and counts,
the config, the encoding spec (put into the model built on the ``meta`` device, where it
costs no memory), the sizes the config describes against the weight files' bytes, and the
tokenizer question. A folder saved after ``use_encoding`` records its encoding and loads
with it (``pezoo.hf.from_pretrained``); its spec is the recorded one.

The passkey grid (``harness.tasks.lm.passkey``, :func:`passkey_hf`) is asked of the model by a
greedy decode, a length S being S bytes of text as above: the sample's bytes before the answer
are read (tokenized, or as bytes), then the model's greedy continuation is decoded for as many
tokens as the answer has bytes (6). Read as bytes, a sample is right when those bytes are the
answer, as the track's own models are scored; with a tokenizer, when the decoded text is the
key after optional whitespace and no digit follows it (a tokenizer may put the space in the
key's token or not, and a space-less answer is still the key).
"""

from __future__ import annotations

import inspect
import math
import pickle
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from harness.config.checks import check_int
from harness.lm.config import MAX_LM_LENGTH
from harness.records.lm_metrics import LengthScore, PasskeyCell
from harness.tasks.lm import BOS
from harness.tasks.lm.corpora import Corpus
from harness.tasks.lm.data import scored_regions
from harness.tasks.lm.passkey import ANSWER_BYTES, DEPTHS, passkey_lengths, passkey_samples
from harness.tasks.lm.split import split

__all__ = ["HfCheck", "check_hf", "hf_scores", "load_hf", "passkey_hf", "score_hf"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
"""Files whose presence says a model folder has a tokenizer."""

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf")
"""Suffixes of the files a model folder's weights may be in."""

PARAMETERS_PER_BYTE = 8
"""The most parameters a model may have per byte of its weight files (a 4-bit quantized file
holds 2 per byte): a config describing more (``n_positions=1e9`` over a file of 128 rows)
would allocate what no file fills, and is refused before anything is allocated."""


@dataclass(frozen=True)
class HfCheck:
    """The checked arguments of a scoring (:func:`check_hf`).

    Attributes:
        folder: the model folder.
        spec: the encoding put into the model (a saved adapted model's: the recorded one).
        saved: the folder holds a model saved after ``use_encoding`` (it loads with its encoding).
        lengths: the test lengths in bytes, increasing.
        regions, tail, chunk: as :func:`hf_scores`.
        as_bytes: read the text as bytes (no tokenizer).
    """

    folder: Path
    spec: str
    saved: bool
    lengths: tuple[int, ...]
    regions: int
    tail: int
    chunk: int
    as_bytes: bool


def _first_line(exc: BaseException) -> str:
    """The exception's type and first line, or its first two where the first only heads the
    reason (transformers' validation errors: "Class validation error for validator
    'validate_architecture':", the hidden size and heads on the next line)."""
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    why = text[0] if text else ""
    if why.endswith(":") and len(text) > 1:
        why = f"{why} {text[1]}"
    return f"{type(exc).__name__}: {why}" if why else type(exc).__name__


def _check_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    if not lengths:
        raise ValueError("give at least one test length")
    for s in lengths:
        check_int("a test length", s, minimum=2, maximum=MAX_LM_LENGTH)
    ordered = tuple(sorted(lengths))
    if len(set(ordered)) != len(ordered):
        raise ValueError(f"a test length is given twice: {list(lengths)}")
    if any(ordered[-1] % s for s in ordered):
        raise ValueError(f"every length must divide the longest, {ordered[-1]}: got {list(lengths)}")
    return ordered


def _meta_model(config: Any) -> Any:
    """The model ``config`` describes, built on the meta device (no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def _check_size(folder: Path, model: Any) -> None:
    """ValueError when the config describes far more parameters than the weight files hold."""
    held = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    described = sum(p.numel() for p in model.parameters())
    if held and described > PARAMETERS_PER_BYTE * held:
        raise ValueError(
            f"{folder}: its config describes {described:,} parameters, but its weight files hold {held:,} bytes: "
            "a size in config.json is wrong (a position table, the vocabulary, a width); nothing was loaded"
        )


def check_hf(
    model_dir: str | Path,
    spec: str | None,
    lengths: Sequence[int],
    *,
    regions: int = 4,
    tail: int = 1024,
    chunk: int = 512,
    as_bytes: bool = False,
) -> HfCheck:
    """Check everything :func:`hf_scores` takes before loading the model or the corpus: the
    lengths and counts, the folder's config, ``spec`` put into the model the config describes
    (built on the meta device), the sizes the config describes against the weight files, and
    whether the text is read with a tokenizer or as bytes. ``spec`` None: the encoding a
    folder saved after ``use_encoding`` records. ValueError saying what is wrong."""
    from transformers import AutoConfig

    import pezoo.hf  # registers the adapted models' types, so their configs read

    ordered = _check_lengths(lengths)
    check_int("regions", regions, minimum=1, maximum=10_000)
    check_int("tail", tail, minimum=1, maximum=MAX_LM_LENGTH)
    check_int("chunk", chunk, minimum=1, maximum=MAX_LM_LENGTH)
    if spec is not None and not isinstance(spec, str):
        raise ValueError(f"the encoding spec is a string, got {type(spec).__name__}")
    folder = Path(model_dir)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} has no config.json: not a Hugging Face model folder")
    try:
        config = AutoConfig.from_pretrained(folder)
    except Exception as exc:  # whatever a damaged or foreign config.json provokes
        raise ValueError(f"{folder}: its config.json cannot be read ({_first_line(exc)})") from None
    record = getattr(config, pezoo.hf.CONFIG_KEY, None)
    saved = isinstance(record, dict) and isinstance(record.get("spec"), str)
    if saved:
        assert isinstance(record, dict)
        if spec is not None and spec != record["spec"]:
            raise ValueError(
                f"{folder} holds a model saved with encoding {record['spec']!r} (pezoo.hf.use_encoding), which its "
                f"weights were trained with: score it with that encoding (--pe {record['spec']}, or leave --pe out)"
            )
        spec = record["spec"]
    elif spec is None:
        raise ValueError(f"{folder} records no pezoo encoding: give one (--pe alibi)")
    assert spec is not None
    try:
        model = _meta_model(config)
    except Exception as exc:  # a config transformers reads but cannot build a model from: not the encoding's fault
        raise ValueError(
            f"{folder}: transformers cannot build the model its config.json describes ({_first_line(exc)})"
        ) from None
    try:
        _check_size(folder, model)
        if not saved:
            pezoo.hf.use_encoding(model, spec)
    except ValueError as exc:
        raise ValueError(_first_line(exc).removeprefix("ValueError: ")) from None
    except Exception as exc:  # an unknown name (a KeyError), a bad option's TypeError, ...
        raise ValueError(f"encoding {spec!r}: {_first_line(exc)}") from None
    has_tokenizer = any((folder / n).exists() for n in TOKENIZER_FILES)
    vocab = getattr(config, "vocab_size", None)
    if as_bytes and has_tokenizer:
        raise ValueError(f"{folder} has a tokenizer: its text is read with it, not as bytes (leave --bytes out)")
    if not as_bytes and not has_tokenizer:
        raise ValueError(
            f"{folder} has no tokenizer: a byte-level model (ids 0..255, BOS {BOS}) is read as bytes only when asked "
            "(--bytes); any other model needs its tokenizer files in the folder"
        )
    if as_bytes and (not isinstance(vocab, int) or vocab <= BOS):
        raise ValueError(f"{folder}: a byte-level model has at least {BOS + 1} token ids (bytes and BOS), got {vocab}")
    return HfCheck(folder, spec, saved, ordered, regions, tail, chunk, as_bytes)


def load_hf(check: HfCheck, device: torch.device) -> tuple[Any, Any | None]:
    """(model with its encoding, in eval mode on ``device``; its tokenizer, None for bytes).
    ValueError naming the folder when they cannot be loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import pezoo.hf

    try:
        if check.saved:
            model = pezoo.hf.from_pretrained(check.folder)
        else:
            model = AutoModelForCausalLM.from_pretrained(check.folder)
            pezoo.hf.use_encoding(model, check.spec)
        model.to(device).eval()
        tokenizer = None if check.as_bytes else AutoTokenizer.from_pretrained(check.folder)
    except pickle.UnpicklingError:  # torch's weights-only loader: what it refuses would run code
        raise ValueError(
            f"{check.folder}: a weights file is a pickle that needs code to load, and a model file's code is never "
            "run (torch's weights-only loader refused it): save the model as safetensors"
        ) from None
    except Exception as exc:  # mismatched shapes, a broken tokenizer, out of memory
        raise ValueError(f"{check.folder}: the model could not be loaded ({_first_line(exc)})") from None
    return model, tokenizer


def _encode(tokenizer: Any | None, window: bytes, scored_from: int) -> tuple[list[int], int, int]:
    """(ids from the start token, index of the first scored target among ids[1:], bytes the
    scored tokens cover); without a tokenizer the bytes are the ids (:func:`check_hf` asked)."""
    if tokenizer is None:
        return [BOS, *window], scored_from, len(window) - scored_from
    text = window.decode("utf-8", errors="replace")
    start = _start_id(tokenizer)
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
    name = _cache_name(model)
    for a in range(0, inputs.shape[1], chunk):
        b = min(inputs.shape[1], a + chunk)
        out = model(input_ids=inputs[:, a:b], use_cache=True, **{name: past})
        past = getattr(out, name)
        lo = max(a, first)
        if lo < b:
            logits = out.logits[0, lo - a :].float()  # (c', v)
            total += float(F.cross_entropy(logits, targets[0, lo:b], reduction="sum"))
    return total


def _cache_name(model: Any) -> str:
    # transformers 5.x names the cache ``cache`` (``past_key_values`` before, deprecated since)
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.no_grad()
def _greedy(model: Any, ids: list[int], steps: int, chunk: int, device: torch.device) -> list[int]:
    """The ``steps`` tokens the model's greedy decode continues ``ids`` with, ``ids`` fed
    ``chunk`` at a time through its KV cache, then one token at a time."""
    name = _cache_name(model)
    tokens = torch.tensor([ids], device=device)  # (1, s)
    past, logits = None, None
    for a in range(0, tokens.shape[1], chunk):
        out = model(input_ids=tokens[:, a : a + chunk], use_cache=True, **{name: past})
        past, logits = getattr(out, name), out.logits[0, -1]
    new: list[int] = []
    while True:
        assert logits is not None
        new.append(int(logits.float().argmax()))
        if len(new) == steps:
            return new
        out = model(input_ids=torch.tensor([new[-1:]], device=device), use_cache=True, **{name: past})
        past, logits = getattr(out, name), out.logits[0, -1]


def _start_id(tokenizer: Any) -> int:
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError("the tokenizer has neither a BOS nor an EOS token to start a window with")
    return int(start)


def passkey_hf(
    check: HfCheck,
    model: Any,
    tokenizer: Any | None,
    corpus: Corpus,
    device: torch.device,
    samples: int,
    *,
    seed: int = 0,
) -> list[PasskeyCell]:
    """The passkey grid of a model :func:`load_hf` loaded (module docstring): ``samples`` per
    (length, depth) at the lengths of ``check`` above the grid's fixed bytes, the fillers cut
    from the held-out regions bits per byte are scored on."""
    data = [r.data for r in scored_regions(split(corpus), check.lengths[-1], check.regions)]
    cells = []
    for s in passkey_lengths(check.lengths):
        right = dict.fromkeys(DEPTHS, 0)
        for x in passkey_samples(data, s, samples, seed):
            context = x.text[:-ANSWER_BYTES]
            if tokenizer is None:
                new = _greedy(model, [BOS, *context], ANSWER_BYTES, check.chunk, device)
                ok = all(t < BOS for t in new) and bytes(new) == x.answer
            else:
                text = context.decode("utf-8", errors="replace")
                ids = [_start_id(tokenizer), *tokenizer(text, add_special_tokens=False)["input_ids"]]
                said = tokenizer.decode(_greedy(model, ids, ANSWER_BYTES, check.chunk, device))
                ok = re.match(rf"\s*{x.key}(?!\d)", said) is not None
            right[x.depth] += ok
        cells += [PasskeyCell(s, d, right[d], samples) for d in DEPTHS]
    return cells


def score_hf(
    check: HfCheck, model: Any, tokenizer: Any | None, corpus: Corpus, device: torch.device
) -> list[LengthScore]:
    """Bits-per-byte scores of a model :func:`load_hf` loaded, per (mode, length)."""
    data = [r.data for r in scored_regions(split(corpus), check.lengths[-1], check.regions)]
    scores = []
    tail = check.tail
    plan = [("windows", s) for s in check.lengths] + [("tail", s) for s in check.lengths if s >= tail]
    for mode, s in plan:
        nats, n_bytes = 0.0, 0
        for region in data:
            windows = [region[i : i + s] for i in range(0, len(region), s)] if mode == "windows" else [region[-s:]]
            for window in windows:
                ids, first, covered = _encode(tokenizer, window, 0 if mode == "windows" else s - tail)
                nats += _nats(model, ids, first, check.chunk, device)
                n_bytes += covered
        ok = math.isfinite(nats) and n_bytes > 0
        scores.append(
            LengthScore(mode, s, nats if ok else None, n_bytes if ok else 0, ok, "" if ok else "no finite loss")
        )
    return scores


def hf_scores(
    model_dir: str | Path,
    spec: str | None,
    corpus: Corpus,
    lengths: Sequence[int],
    *,
    regions: int = 4,
    tail: int = 1024,
    device: torch.device | None = None,
    chunk: int = 512,
    as_bytes: bool = False,
) -> list[LengthScore]:
    """Bits-per-byte scores of the model in ``model_dir`` with encoding ``spec`` (None: the one
    a model saved after ``use_encoding`` records), per (mode, length): :func:`check_hf`, then
    :func:`load_hf`, then :func:`score_hf`. ValueError, before anything is loaded where it can be."""
    check = check_hf(model_dir, spec, lengths, regions=regions, tail=tail, chunk=chunk, as_bytes=as_bytes)
    device = device or torch.device("cpu")
    model, tokenizer = load_hf(check, device)
    return score_hf(check, model, tokenizer, corpus, device)
