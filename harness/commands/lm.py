"""``pezoo lm``: the language-modelling track (docs/lm.md).

pezoo lm corpus [en|code] [--save DIR]         fetch, pin and describe a corpus (and snapshot it)
pezoo lm bench --pe alibi,rope --task lm_en     train and score runs into a store
pezoo lm sweep leaderboard/lm/sweep.toml --task lm_en a sweep file's runs
pezoo lm show --store DIR                       the bpb-vs-length table (and passkey counts) of a store
pezoo lm export --store DIR                     its records as a results file for the board
pezoo lm hf MODEL_DIR --pe alibi                your own Hugging Face model, scored the same way
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import click

from harness.commands.printable import one_line, printable
from harness.lm.config import LM_PRESET_DESCRIPTIONS, LM_PRESETS, LmConfig, lm_preset_config
from harness.lm.record import LmRecord, LmStore, read_records
from harness.lm.run import lock_problem, sweep_lm
from harness.lm.sweep import load_lm_sweep
from harness.records.lm_metrics import LengthScore, grid_text
from harness.records.provenance import resolve_device
from harness.tasks.lm import LM_TASKS, corpora
from harness.tasks.lm.passkey import DEPTHS
from harness.tasks.lm.split import SPLIT_RULE, split
from harness.training.precision import PRECISIONS
from pezoo.spec import split_pe_list

DEFAULT_STORE = "runs/lm"

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


def _store(path: str) -> LmStore:
    """The store at ``path``, its records read once: a store that cannot be used (a file, a
    malformed line) is an error here, before anything is fetched or trained; a torn last line
    is a warning (:meth:`LmStore.records`)."""
    try:
        store = LmStore(path, notice=_warn)
        store.records()
    except OSError as exc:
        raise click.ClickException(
            f"the store {_message(path)} cannot be used: {_message(exc.strerror or exc)}"
        ) from None
    except ValueError as exc:
        raise click.ClickException(_message(exc)) from None
    return store


def _sweep(configs: Sequence[LmConfig], store: LmStore, device) -> dict[str, str]:
    """:func:`sweep_lm`, a store gone bad meanwhile (another process wrote it) a click error."""
    try:
        return sweep_lm(configs, store, device, notice=click.echo)
    except (ValueError, OSError) as exc:
        raise click.ClickException(_message(exc)) from None


@click.group("lm")
def lm() -> None:
    """The language-modelling track: bytes of English and Python, trained at 256, scored in bits per byte to 4096+."""


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
        parts = split(c)
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


def _show(record: LmRecord) -> str:
    cells = []
    for s in record.scores:
        if s.mode == "windows":
            cells.append(f"{s.length}: {s.bpb:.3f}" if s.bpb is not None else f"{s.length}: - ({s.note})")
    return ", ".join(cells)


def _say(score: LengthScore) -> None:
    value = f"{score.bpb:.4f} bpb" if score.bpb is not None else f"not reached: {score.note}"
    click.echo(f"    {score.mode} {score.length}: {value}")


@lm.command("bench")
@click.option("--pe", "pe_list", required=True, help="Encodings, comma-separated (variants as rope@{scaling={...}}).")
@click.option("--task", type=click.Choice(list(LM_TASKS)), default="lm_en", show_default=True)
@click.option("--preset", type=click.Choice(list(LM_PRESETS)), default="lm", show_default=True)
@click.option("--seeds", default="0", show_default=True, help="Comma-separated seeds.")
@click.option("--store", "store_path", default=DEFAULT_STORE, show_default=True, help="Store folder.")
@click.option("--steps", type=click.IntRange(min=1), help="Training steps (default: the preset's).")
@click.option("--precision", type=click.Choice(PRECISIONS), help="Training precision (default: the preset's).")
@click.option("--finetune", type=click.IntRange(min=0), default=0, help="Fine-tune variants this many steps at 4L.")
@click.option(
    "--passkey",
    type=click.IntRange(min=0, max=10_000),
    help="Passkey samples per (length, depth) cell (default: the preset's; 0: not measured).",
)
@click.option("--device", default="auto", show_default=True)
def bench_cmd(pe_list, task, preset, seeds, store_path, steps, precision, finetune, passkey, device) -> None:
    """Train and score each (encoding, seed) on TASK (bits per byte, and the passkey grid); finished
    runs are skipped, unfinished ones resume."""
    overrides = {"train": {"steps": steps, "precision": precision}, "eval": {"passkey": passkey}}
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        configs = [
            lm_preset_config(preset, pe=pe, task=task, seed=seed, overrides=overrides,
                             finetune_steps=finetune if "@" in pe else 0)
            for seed in seed_list
            for pe in split_pe_list(pe_list)
        ]  # fmt: skip
        dev = resolve_device(device)
    except ValueError as exc:
        raise click.UsageError(_message(exc)) from None
    store = _store(store_path)
    click.echo(f"preset {preset}: {LM_PRESET_DESCRIPTIONS[preset]}")
    _corpus(LM_TASKS[task].corpus)
    _report(_sweep(configs, store, dev))


def _report(outcomes: dict[str, str]) -> None:
    failed = [f"{run}: {_message(why)}" for run, why in outcomes.items() if why.startswith("failed")]
    busy = sum(why.startswith("busy") for why in outcomes.values())
    left = f"; {busy} left to another sweep on the store" if busy else ""
    click.echo(f"{len(outcomes) - len(failed) - busy} of {len(outcomes)} runs finished or cached{left}")
    if failed:
        raise click.ClickException("; ".join(failed))


@lm.command("sweep")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--task", "tasks", multiple=True, help="Only these tasks of the file (repeatable).")
@click.option("--store", "store_path", default=DEFAULT_STORE, show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option(
    "--plan", is_flag=True, help="List the runs: done, busy (another sweep trains it now) or todo; run nothing."
)
def sweep_cmd(file, tasks, store_path, device, plan) -> None:
    """Run an LM sweep file (leaderboard/lm/sweep.toml): trained runs seed-major, then RoPE's variants."""
    try:
        configs = load_lm_sweep(file, tasks=tasks or None)
        dev = resolve_device(device)
    except ValueError as exc:
        raise click.UsageError(_message(exc)) from None
    store = _store(store_path)
    if plan:
        _plan(configs, store)
        return
    for task in dict.fromkeys(c.task for c in configs):
        _corpus(LM_TASKS[task].corpus)
    _report(_sweep(configs, store, dev))


def _plan(configs: Sequence[LmConfig], store: LmStore) -> None:
    """Each run of the sweep: done (in the store), busy (another sweep on the store trains it
    now, LmStore.hold), todo, or error (its lock cannot be taken); then the counts, and an
    error naming the locks that cannot be taken."""
    done = store.finished()
    marks: dict[str, str] = {}
    problems: dict[str, str] = {}
    for cfg in configs:
        run_id = cfg.run_id()
        if run_id in done:
            marks[run_id] = "done"
            continue
        try:
            marks[run_id] = "busy" if store.held(run_id) else "todo"
        except OSError as exc:  # a folder where the lock file goes, locks/ a file
            marks[run_id], problems[run_id] = "error", lock_problem(store, exc)
    for cfg in configs:
        line = f"{marks[cfg.run_id()]}  {cfg.task} {cfg.pe}{_options(cfg)} seed {cfg.seed}  {cfg.run_id()}"
        click.echo(printable(line))
    busy = sum(m == "busy" for m in marks.values())
    elsewhere = f", {busy} training in another sweep" if busy else ""
    click.echo(f"{sum(m == 'done' for m in marks.values())} of {len(configs)} done{elsewhere}")
    if problems:
        first = next(iter(problems))
        raise click.ClickException(
            f"{len(problems)} run(s) cannot be locked, so a sweep would fail them: {first}: {_message(problems[first])}"
        )


def _options(cfg) -> str:
    text = json.dumps(dict(cfg.pe_options), sort_keys=True) if cfg.pe_options else ""
    if cfg.eval_pe_options:
        text += "@" + json.dumps(dict(cfg.eval_pe_options), sort_keys=True)
    if cfg.finetune_steps:
        text += f" +{cfg.finetune_steps} steps at {cfg.finetune_length}"
    return text


@lm.command("show")
@click.option("--store", "store_path", default=DEFAULT_STORE, show_default=True)
def show_cmd(store_path) -> None:
    """Each finished run's bits per byte per length (non-overlapping windows), its passkey samples
    right per length (every depth together; "not measured" for a record without the grid) and
    seconds per step."""
    for r in _store(store_path).records():
        c = r.config
        sps = f"{r.seconds_per_step:.3f} s/step" if r.seconds_per_step else "no training"
        corpus = str(r.provenance["corpus_sha256"])[:12]
        keys = f"passkey {grid_text(r.passkey)}"
        # a store's text may hold anything: escape what a terminal would act on (harness.commands.printable)
        click.echo(printable(f"{c.task} {c.pe}{_options(c)} seed {c.seed}: {_show(r)}; {keys}; {sps}; corpus {corpus}"))


@lm.command("export")
@click.option("--store", "store_path", default=DEFAULT_STORE, show_default=True)
@click.option("--out", "out_dir", default="leaderboard/results/lm", show_default=True, type=click.Path(file_okay=False))
def export_cmd(store_path, out_dir) -> None:
    """Write the store's records not yet published under OUT as one new results file (JSON Lines).
    A run OUT publishes with other numbers is refused, naming the file, and nothing is written."""
    records = _store(store_path).records()
    out = Path(out_dir)
    published = _published(out) if out.is_dir() else {}
    mine: dict[str, LmRecord] = {}
    for r in records:
        if r.run_id in mine and _numbers(mine[r.run_id]) != _numbers(r):
            raise click.ClickException(
                f"the store holds run {r.run_id} twice, with different numbers: nothing exported"
            )
        mine.setdefault(r.run_id, r)
    differ = [
        (r, published[r.run_id][1])
        for r in mine.values()
        if r.run_id in published and _numbers(r) != _numbers(published[r.run_id][0])
    ]
    if differ:
        record, where = differ[0]
        more = f" (and {len(differ) - 1} more)" if len(differ) > 1 else ""
        raise click.ClickException(
            f"{_message(where)} publishes run {record.run_id} with other numbers than the store's{more}: nothing "
            "exported (a run's numbers are published once; remove or fix one of them)"
        )
    new = [r for r in mine.values() if r.run_id not in published]
    if not new:
        click.echo("nothing new to export")
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"lm-{time.strftime('%Y%m%d', time.gmtime())}-{new[0].run_id[3:15]}.jsonl"
    try:
        with open(path, "x", encoding="utf-8") as f:  # never over a file already there
            f.write("".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in new))
    except OSError as exc:
        raise click.ClickException(f"{_message(path)} cannot be written: {_message(exc.strerror or exc)}") from None
    click.echo(f"wrote {len(new)} records to {path}")


def _published(out: Path) -> dict[str, tuple[LmRecord, Path]]:
    """{run id: (record, the file it is in)} of the results files in ``out``; a file that cannot
    be read is a click error naming it."""
    published: dict[str, tuple[LmRecord, Path]] = {}
    for path in sorted(out.glob("*.jsonl")):
        try:
            for r in read_records(path):
                published.setdefault(r.run_id, (r, path))
        except (ValueError, OSError) as exc:  # a malformed line (named), undecodable bytes, a folder
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            text = _message(why)
            raise click.ClickException(text if str(path) in text else f"{_message(path)}: {text}") from None
    return published


def _numbers(record: LmRecord) -> tuple[object, ...]:
    """What a run publishes: its scores, passkey cells, final loss and training steps (timings and
    where it ran may differ between two runs of one config; these may not)."""
    return (record.scores, record.passkey, record.final_loss, record.train_steps)


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
        length_list = tuple(int(s) for s in lengths.split(","))
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
