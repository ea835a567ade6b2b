"""``pezoo lm``: what the language-modelling track has of its own (docs/lm.md).

pezoo lm corpus [en|code] [--save DIR]         fetch, pin and describe a corpus (and snapshot it)
pezoo lm hf MODEL_DIR --pe alibi                your own Hugging Face model, scored as the track scores

The track's runs are the harness's: ``pezoo bench --task lm_en --preset lm`` trains and scores
them into the one store, ``pezoo bench --sweep leaderboard/lm/sweep.toml`` runs its sweep,
``pezoo sweep plan`` plans it and ``pezoo leaderboard export`` publishes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from harness.commands.printable import one_line, printable
from harness.records.provenance import resolve_device
from harness.tasks.lm import LM_TASKS, corpora
from harness.tasks.lm.passkey import DEPTHS
from harness.tasks.lm.split import SPLIT_RULE, split

MESSAGE_LIMIT = 1000
"""The most characters of an error message shown: a 1 MB spec is not echoed whole."""


def _message(exc: object) -> str:
    """``exc`` on one line, printable on a terminal, its middle cut out past
    :data:`MESSAGE_LIMIT` characters (the end, which usually says what is wrong, kept)."""
    text = printable(one_line(exc))
    if len(text) <= MESSAGE_LIMIT:
        return text
    head, tail = text[: MESSAGE_LIMIT * 3 // 5], text[-MESSAGE_LIMIT * 2 // 5 :]
    return f"{head} [... {len(text) - len(head) - len(tail):,} characters ...] {tail}"


def _warn(message: str) -> None:
    click.echo(f"warning: {_message(message)}", err=True)


@click.group("lm")
def lm() -> None:
    """The language-modelling track's corpora and your own model (runs: pezoo bench --task lm_en --preset lm)."""


def _corpus(name: str) -> corpora.Corpus:
    try:
        return corpora.load_corpus(name)
    except corpora.CorpusError as exc:
        raise click.ClickException(_message(exc)) from None


@lm.command("corpus")
@click.argument("names", nargs=-1)
@click.option(
    "--save",
    "save_dir",
    type=click.Path(file_okay=False),
    help="Also write each as DIR/NAME.zip: a snapshot another machine reads with $PEZOO_LM_SNAPSHOTS=DIR.",
)
def corpus_cmd(names: Sequence[str], save_dir: str | None) -> None:
    """Fetch (into the cache: $PEZOO_LM_CACHE or ~/.cache/pezoo/lm), check and describe corpora."""
    for name in names:
        if name not in corpora.CORPORA:
            raise click.UsageError(f"unknown corpus {name!r}; valid: {', '.join(corpora.CORPORA)}")
    try:  # a --save that cannot be written is refused before anything is fetched
        for name in names or tuple(corpora.CORPORA):
            if save_dir is not None:
                corpora.snapshot_path(Path(save_dir), name)
    except corpora.CorpusError as exc:
        raise click.UsageError(str(exc)) from None
    for name in names or tuple(corpora.CORPORA):
        c = _corpus(name)
        try:
            parts = split(c)
        except ValueError as exc:  # a snapshot too small to hold out a test set (bench says the same)
            raise click.ClickException(str(exc)) from None
        click.echo(corpora.describe(c))
        click.echo(f"  documents sha256 {c.sha256}")
        for source in c.sources:
            click.echo(f"  from {source}")
        click.echo(
            f"  split ({SPLIT_RULE}): {len(parts.train)} training documents, {len(parts.heldout)} held out "
            f"({parts.heldout_bytes:,} bytes), near-duplicates in {sum(len(g) > 1 for g in parts.groups)} groups"
        )
        click.echo(f"  corpus sha256 (documents and split, what runs record) {parts.sha256}")
        if save_dir is not None:
            try:
                click.echo(f"  saved as {corpora.save_snapshot(c, Path(save_dir))}")
            except corpora.CorpusError as exc:
                raise click.ClickException(str(exc)) from None


def _lengths(value: str) -> tuple[int, ...]:
    """``--lengths`` as integers; ValueError naming the option and the value (it said "invalid
    literal for int() with base 10: ''" of ``256,,512``)."""
    try:
        return tuple(int(s) for s in value.split(","))
    except ValueError:
        raise ValueError(
            f"--lengths takes comma-separated whole numbers of bytes, e.g. 256,512, got {value!r}"
        ) from None


@lm.command("hf")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--pe",
    "spec",
    help="The pezoo encoding to put in the model (pezoo.hf.use_encoding); default: the one a model saved after "
    "use_encoding records.",
)
@click.option("--task", type=click.Choice(list(LM_TASKS)), default="lm_en", show_default=True)
@click.option("--lengths", default="256,512,1024,2048,4096", show_default=True, help="Test lengths in bytes.")
@click.option("--regions", type=click.IntRange(min=1, max=10_000), default=4, show_default=True)
@click.option("--tail", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option(
    "--bytes",
    "as_bytes",
    is_flag=True,
    help="Read the text as bytes (ids 0..255, BOS 256): a byte-level model without a tokenizer.",
)
@click.option(
    "--passkey",
    type=click.IntRange(min=0, max=10_000),
    default=0,
    show_default=True,
    help="Passkey samples per (length, depth) cell, asked by greedy decoding (0: no passkey grid).",
)
@click.option("--device", default="auto", show_default=True)
def hf_cmd(model_dir, spec, task, lengths, regions, tail, as_bytes, passkey, device) -> None:
    """Your own model: a Hugging Face causal LM in MODEL_DIR with encoding SPEC (pezoo.hf), scored in
    bits per byte of the held-out text at each length, in both modes, and with --passkey on the
    passkey grid (samples right per length and depth). Its tokenizer's tokens are scored as the
    bytes they cover (docs/lm.md). Every argument is checked before the model or the corpus is
    loaded."""
    from harness.lm.hf import check_hf, load_hf, passkey_hf, score_hf

    try:
        length_list = _lengths(lengths)
        dev = resolve_device(device)
        check = check_hf(model_dir, spec, length_list, regions=regions, tail=tail, as_bytes=as_bytes)
    except ValueError as exc:
        raise click.UsageError(_message(exc)) from None
    try:
        model, tokenizer = load_hf(check, dev)
    except ValueError as exc:
        raise click.ClickException(_message(exc)) from None
    corpus = _corpus(LM_TASKS[task].corpus)
    try:
        scores = score_hf(check, model, tokenizer, corpus, dev)
        grid = passkey_hf(check, model, tokenizer, corpus, dev, passkey) if passkey else []
    except (ValueError, RuntimeError, MemoryError) as exc:  # too few held-out regions, a forward pass that fails
        raise click.ClickException(_message(exc)) from None
    corpus_hash = split(corpus).sha256[:16]
    click.echo(printable(f"{model_dir} with {check.spec} on {task} (corpus sha256 {corpus_hash}), bits per byte:"))
    click.echo(f"{'length':>8} {'windows':>9} {'tail':>9}")
    for s in check.lengths:
        cells = []
        for mode in ("windows", "tail"):
            score = next((x for x in scores if x.mode == mode and x.length == s), None)
            cells.append("" if score is None else "-" if score.bpb is None else f"{score.bpb:.4f}")
        click.echo(f"{s:>8} {cells[0]:>9} {cells[1]:>9}")
    if grid:
        click.echo(f"passkey retrieval, samples right of {passkey} per depth (% of the filler):")
        click.echo(f"{'length':>8} " + " ".join(f"{d:>7}%" for d in DEPTHS))
        for s in dict.fromkeys(c.length for c in grid):
            row = [f"{c.right}/{c.total}" for d in DEPTHS for c in grid if c.length == s and c.depth == d]
            click.echo(f"{s:>8} " + " ".join(f"{x:>8}" for x in row))
