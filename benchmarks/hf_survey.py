"""Which transformers causal LMs pezoo.hf could adapt with a reading it already has.

    python benchmarks/hf_survey.py [--types a,b,...] [--json out.json]

For every causal-LM ``model_type`` of the installed transformers that pezoo.hf does not adapt
(or the ``--types`` given), build a tiny random model (:data:`SMALL`, the keys a config does
not know ignored by it), scale its q and k projections up so attention is sharp enough for a
wrong reading to show, and try each distinct family reading of
:data:`pezoo.hf.families.FAMILIES` as if it were the model's: adapted with that family's own
encoding (read from the model's config), do the logits of a 12-token batch equal the untouched
model's? A type whose best reading agrees to :data:`AGREE` is a candidate: add it to FAMILIES
with that reading, then give it a tiny config in tests/pezoo/hf_tiny.py, which puts it through
every family test (docs/use-in-your-model.md, "Adding a family"). Agreement here is evidence,
not proof: a config the tiny model leaves at a default (a window longer than the batch, a
temperature of 1 at these positions) cannot show a reading that ignores it; the family tests
and a look at the modelling code decide.

Prints one line per type (its parameters, the best reading and its largest logit difference,
or why none could run) and, with ``--json``, writes them. Each type is tried in a fresh
process whose private memory is capped (``--memory-gib``, default 4: ``RLIMIT_DATA``), so a
type whose "tiny" model is not (a config that ignores the sizes given) fails by itself
instead of taking the machine, and nothing one type leaves behind reaches the next.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import multiprocessing
import os
import resource
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

import pezoo.hf
from pezoo.hf.families import FAMILIES, Family

AGREE = 1e-5
"""The largest logit difference at which a reading reproduces a model (the family tests' tolerance)."""

SMALL: dict[str, Any] = {
    "vocab_size": 100, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64,
    "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64, "d_model": 32, "n_layers": 2, "n_heads": 4,
    "num_experts": 2, "num_local_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
    "n_group": 1, "topk_group": 1, "shared_expert_intermediate_size": 32,
}  # fmt: skip
"""A tiny model's sizes under the names configs use for them (hidden 32, 2 layers, 4 heads)."""

IDS = torch.tensor([list(range(3, 15))])


def readings() -> dict[str, Family]:
    """One family per distinct reading (the first model type that has it names it)."""
    out: dict[str, Family] = {}
    for name, family in FAMILIES.items():
        if family not in out.values():
            out[name] = family
    return out


def tiny(model_type: str) -> transformers.PreTrainedModel:
    """A tiny random ``model_type`` in eval mode without dropout, every weight moved off its
    initial value (a parameter initialised to a constant, such as Doge's zero decay, would hide
    what it does), its q and k (where it names them ``q_proj``/``k_proj``, or one fused
    projection) scaled ×4."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **SMALL)
    for key in ("attention_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "hidden_dropout", "dropout"):
        if hasattr(config, key):
            setattr(config, key, 0.0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():  # no weight left at its initial constant (a zero gate, a zero decay)
            if param.is_floating_point():
                param.add_(torch.randn_like(param), alpha=0.1)
        for name, module in model.named_modules():
            if name.rsplit(".", 1)[-1] in ("q_proj", "k_proj", "query_key_value", "qkv_proj", "c_attn", "Wqkv"):
                if isinstance(getattr(module, "weight", None), torch.Tensor):
                    module.weight.mul_(4)
    return model


def without_table(model: transformers.PreTrainedModel, family: Family) -> torch.Tensor:
    """The logits of ``model`` with the position table ``family`` names zeroed (what ``nope``
    must give where a family's own positions are a table added to the embeddings)."""
    blank = copy.deepcopy(model)
    part: Any = blank.base_model
    for name in filter(None, f"{family.core}.{family.table}".split(".")):
        part = getattr(part, name)
    with torch.no_grad():
        for tensor in [*part.parameters(), *part.buffers()]:
            tensor.zero_()
        return blank(IDS).logits


def try_reading(model: transformers.PreTrainedModel, want: torch.Tensor, family: Family) -> float | str:
    """The largest logit difference of ``model`` adapted as ``family`` reads it (its own
    encoding; ``nope`` against the model without its table where its positions are a table),
    or the error."""
    model_type = model.config.model_type
    kept = FAMILIES.get(model_type)
    FAMILIES[model_type] = family
    try:
        name = family.own_encoding(model.config) or "nope"
        if family.table is not None:
            want = without_table(model, family)
        with torch.no_grad():
            got = pezoo.hf.use_encoding(copy.deepcopy(model), name)(IDS).logits
        return float((got - want).abs().max())
    except Exception as exc:  # any failure is this reading's answer, not the survey's
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
    finally:
        if kept is None:
            del FAMILIES[model_type]
        else:
            FAMILIES[model_type] = kept


def survey(model_type: str) -> dict[str, Any]:
    """One type's row: its parameter count, each reading's difference, the best reading."""
    row: dict[str, Any] = {"model_type": model_type}
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            model = tiny(model_type)
            with torch.no_grad():
                want = model(IDS).logits
    except Exception as exc:  # a type whose tiny model cannot be built or run here
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return row
    row["params"] = sum(p.numel() for p in model.parameters())
    built = model.config.model_type
    if built != model_type and built in FAMILIES:  # a name for another type's config (gpt-sw3: GPT-2's)
        row["alias_of"] = built
        return row
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        tried = {name: try_reading(model, want, family) for name, family in readings().items()}
    numbers = {name: diff for name, diff in tried.items() if isinstance(diff, float)}
    row["readings"] = tried
    if numbers:
        best = min(numbers, key=numbers.__getitem__)
        row.update(best=best, diff=numbers[best], candidate=numbers[best] <= AGREE)
    return row


def line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['model_type']}: not built here ({row['error']})"
    if "alias_of" in row:
        return f"{row['model_type']}: builds a {row['alias_of']} model, which pezoo.hf adapts"
    if "best" not in row:
        return f"{row['model_type']}: no reading ran ({row['params']:,} parameters)"
    verdict = "CANDIDATE" if row["candidate"] else "no"
    best = f"best reading {row['best']} ({row['diff']:.1e}; {row['params']:,} parameters)"
    return f"{row['model_type']}: {verdict}, {best}"


def _capped(gib: float) -> None:
    """A survey child's cap on its private memory (``RLIMIT_DATA``), never above a hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    cap = int(gib * 2**30)
    resource.setrlimit(resource.RLIMIT_DATA, (cap if hard == resource.RLIM_INFINITY else min(cap, hard), hard))


TYPES_PER_PROCESS = 8
"""Types tried in one process before a fresh one (its import of torch and transformers costs
seconds; what a type leaves behind reaches at most seven more)."""


def survey_apart(types: list[str], gib: float) -> Iterator[dict[str, Any]]:
    """:func:`survey` of each type in processes capped at ``gib`` GiB, a fresh one every
    :data:`TYPES_PER_PROCESS` types; a type that takes its process down is that type's row."""
    context = multiprocessing.get_context("spawn")

    def fresh() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            1, mp_context=context, initializer=_capped, initargs=(gib,), max_tasks_per_child=TYPES_PER_PROCESS
        )

    pool = fresh()
    try:
        for model_type in types:
            try:
                yield pool.submit(survey, model_type).result()
            except BrokenProcessPool:
                yield {"model_type": model_type, "error": "its process died (killed, or out of memory)"}
                pool.shutdown()
                pool = fresh()
    finally:
        pool.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", help="comma-separated model types (default: every causal LM pezoo.hf lacks)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--memory-gib", type=float, default=4.0, help="each type in its own process capped so (0: all in this one)"
    )
    args = parser.parse_args(argv)
    types = args.types.split(",") if args.types else sorted(set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) - set(FAMILIES))
    rows = []
    for row in survey_apart(types, args.memory_gib) if args.memory_gib > 0 else map(survey, types):
        rows.append(row)
        print(line(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    found = sum(bool(row.get("candidate")) for row in rows)
    print(f"{found} candidate(s) of {len(rows)} type(s); transformers {transformers.__version__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
