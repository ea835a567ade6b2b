"""What `leaderboard check` and `build` do with hostile files (issue 39, the leaderboard side):

- `build` writes and deletes only inside its site folder: no symlink below it is
  followed, the manifest names only pages, a FIFO is never opened, builds take export's lock;
- every results, diagnostics, sweep and retirement file is read by one bounded,
  regular-file-only reader (``harness.records.inputs``): FIFOs, devices and oversized or deeply
  nested files are refused with the documented error, never a hang, a memory blow-up or
  a RecursionError;
- `check` passing means `build` succeeds: timestamps, file names and numbers are
  range-checked, and each record's metrics are exactly the scales its config evaluates;
- names reach the terminal escaped.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from leaderboard_fixtures import make_record, write_jsonl

from harness.cli import main
from harness.records.identity import config_run_id
from leaderboard.export import exporting, import_results
from leaderboard.schema import DIAGNOSTICS_DIR, checksum, validate_record
from leaderboard.writing import MANIFEST

EM = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.0}
DEEP_TOML = "a = " + "[" * 100_000 + "\n"
HANG_SECONDS = 20


def _results(root: Path) -> Path:
    results = root / "results"
    write_jsonl(results / "a.jsonl", [make_record("rope", "copy", 0, EM, train_max=2)])
    write_jsonl(results / "b.jsonl", [make_record("nope", "copy", 0, EM, train_max=2)])
    return results


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _check(results: Path):
    return _cli("leaderboard", "check", "--results", str(results))


def _build(results: Path, site: Path):
    return _cli("leaderboard", "build", "--results", str(results), "--out", str(site))


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # a ClickException, not a traceback
    text = result.output.strip()
    assert text.startswith("Error: ") and "\n" not in text, text
    return text


def _error_line(result) -> str:
    """The one-line error a command that reported first ends with (exit 1, no traceback)."""
    output = _refused(result)
    last = output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and output.count("Error: ") == 1, output
    return last


def _refused(result) -> str:
    """A ClickException (exit 1, no traceback) of one or more lines; its text."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    return result.output


def _resealed(record: dict[str, Any]) -> dict[str, Any]:
    record["run_id"] = config_run_id(record["config"])
    record["checksum"] = checksum(record)
    return record


def _unblock(fifo: Path) -> None:
    """Let a reader blocked opening or reading ``fifo`` go (it sees an empty file)."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def _finishes(call: Callable[[], Any], fifos: list[Path]) -> Any:
    """``call()``'s result, failing the test if it does not return within HANG_SECONDS (the
    old readers opened FIFOs and waited forever; the FIFOs are then unblocked)."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(HANG_SECONDS)
    hung = worker.is_alive()
    for fifo in fifos:
        _unblock(fifo)
    worker.join(HANG_SECONDS)
    assert not hung, f"still reading after {HANG_SECONDS} s: blocked on a FIFO"
    return out[0]


@pytest.fixture
def built(tmp_path) -> tuple[Path, Path]:
    results = _results(tmp_path)
    assert _build(results, tmp_path / "site").exit_code == 0
    return results, tmp_path / "site"


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------
# 1. build stays inside its folder
# --------------------------------------------------------------------------------------


def test_build_neither_deletes_nor_writes_through_a_symlinked_folder(built, tmp_path):
    """The issue's case: site/tasks -> ../outside and tasks/victim.html in the manifest."""
    results, site = built
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.html").write_text("someone's file")
    for page in (site / "tasks").iterdir():
        page.unlink()
    (site / "tasks").rmdir()
    (site / "tasks").symlink_to("../outside")
    manifest = json.loads((site / MANIFEST).read_text())
    manifest["files"].append("tasks/victim.html")
    (site / MANIFEST).write_text(json.dumps(manifest))
    before = _snapshot(tmp_path)
    error = _one_line_error(_build(results, site))
    assert "symlink" in error and "tasks" in error
    assert (outside / "victim.html").read_text() == "someone's file"
    assert sorted(p.name for p in outside.iterdir()) == ["victim.html"]  # no copy.html written there
    assert _snapshot(tmp_path) == before


def test_build_does_not_replace_a_page_that_is_a_symlink(built, tmp_path):
    results, site = built
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text((site / "index.html").read_text())
    (site / "index.html").unlink()
    (site / "index.html").symlink_to(elsewhere)
    (results / "b.jsonl").unlink()  # a rebuild that changes the index
    before = elsewhere.read_text()
    assert "symlink" in _one_line_error(_build(results, site))
    assert (site / "index.html").is_symlink() and elsewhere.read_text() == before


@pytest.mark.parametrize(
    "entry",
    [
        "notes.txt",  # a file in the folder that no build writes
        "tasks/sub/deep.html",
        "../outside/victim.html",
        "tasks/../../outside/victim.html",
        "ABSOLUTE",
        "tasks/.hidden",
        "",
        7,
    ],
)
def test_a_manifest_entry_that_is_not_a_page_is_refused_and_nothing_is_deleted(built, tmp_path, entry):
    results, site = built
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.html").write_text("someone's file")
    (site / "notes.txt").write_text("my notes")
    if entry == "ABSOLUTE":
        entry = str(tmp_path / "outside" / "victim.html")
    manifest = json.loads((site / MANIFEST).read_text())
    manifest["files"].append(entry)
    (site / MANIFEST).write_text(json.dumps(manifest))
    before = _snapshot(tmp_path)
    assert "manifest" in _one_line_error(_build(results, site))
    assert _snapshot(tmp_path) == before


def test_a_fifo_where_a_new_page_goes_does_not_hang_build(built):
    results, site = built
    write_jsonl(results / "c.jsonl", [make_record("rope", "reverse", 0, EM, train_max=2)])  # a new page
    fifo = site / "tasks" / "reverse.html"
    os.mkfifo(fifo)
    result = _finishes(lambda: _build(results, site), [fifo])
    assert "reverse.html" in _one_line_error(result)


def test_a_fifo_manifest_does_not_hang_build(built, tmp_path):
    results, site = built
    (site / MANIFEST).unlink()
    os.mkfifo(site / MANIFEST)
    result = _finishes(lambda: _build(results, site), [site / MANIFEST])
    assert "FIFO" in _one_line_error(result)


def test_build_waits_for_the_export_lock_on_its_folder(built, tmp_path):
    """Two builds (or a build and an export) into one folder take turns: while the lock is
    held, a build writes nothing; it finishes once the lock is released."""
    results, site = built
    (results / "b.jsonl").unlink()  # the build will change the pages and delete one
    before = _snapshot(site)
    done: list[Any] = []
    with exporting(site):
        worker = threading.Thread(target=lambda: done.append(_build(results, site)), daemon=True)
        worker.start()
        worker.join(3)
        assert worker.is_alive() and _snapshot(site) == before  # waiting, nothing written
    worker.join(60)
    assert done and done[0].exit_code == 0, done
    assert "encodings/nope.html" not in json.loads((site / MANIFEST).read_text())["files"]
    assert not (site / "encodings" / "nope.html").exists()


# --------------------------------------------------------------------------------------
# 2. one bounded, regular-file-only reader
# --------------------------------------------------------------------------------------


def test_a_deeply_nested_sweep_file_beside_the_results_is_reported_and_ignored(tmp_path):
    results = _results(tmp_path)
    (tmp_path / "deep.toml").write_text(DEEP_TOML)
    for result in (_check(results), _build(results, tmp_path / "site")):
        assert result.exit_code == 0, result.output
        assert "note: sweep file deep.toml" in result.output and "nested more than" in result.output


def test_a_deeply_nested_encoding_spec_is_an_error_not_a_recursion_error(tmp_path):
    """The nesting may hide in a string: an encoding's options in a sweep file or on --pe."""
    results = _results(tmp_path)
    spec = "rope{a=" + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.toml").write_text(f'preset = "smoke"\ntask = ["copy"]\npe = ["{spec}"]\n')
    result = _check(results)
    assert result.exit_code == 0 and "note: sweep file deep.toml" in result.output, result.output
    assert "nests more than 32 levels" in result.output
    store = tmp_path / "store.sqlite"
    result = _cli("bench", "--pe", spec, "--task", "copy", "--preset", "smoke", "--store", str(store))
    assert result.exit_code == 2 and "nests more than 32 levels" in result.output, result.output
    assert not store.exists()


def test_a_deeply_nested_retired_toml_is_a_one_line_error(tmp_path):
    results = _results(tmp_path)
    (tmp_path / "retired.toml").write_text(DEEP_TOML)
    for result in (_check(results), _build(results, tmp_path / "site")):
        assert "nested more than" in _error_line(result)
    assert not (tmp_path / "site").exists()


def test_a_deeply_nested_sweep_file_is_a_usage_error_for_sweep_plan_and_bench(tmp_path):
    sweep = tmp_path / "deep.toml"
    sweep.write_text(DEEP_TOML)
    store = tmp_path / "store.sqlite"
    for args in (
        ["sweep", "plan", str(sweep), "--store", str(store)],
        ["bench", "--sweep", str(sweep), "--store", str(store)],
    ):
        result = _cli(*args)
        assert result.exit_code == 2, (args, result.output)  # a usage error, not a traceback
        assert isinstance(result.exception, SystemExit) and "nested more than" in result.output
    assert not store.exists()


def test_a_fifo_as_the_sweep_file_of_sweep_plan_and_bench_is_a_usage_error(tmp_path):
    fifo, store = tmp_path / "sweep.toml", tmp_path / "store.sqlite"
    os.mkfifo(fifo)
    for args in (
        ["sweep", "plan", str(fifo), "--store", str(store)],
        ["bench", "--sweep", str(fifo), "--store", str(store)],
    ):
        result = _finishes(lambda args=args: _cli(*args), [fifo])
        assert result.exit_code == 2 and "FIFO" in result.output, (args, result.output)
    assert not store.exists()


def test_a_fifo_named_like_a_diagnostics_file_does_not_hang_check_or_build(tmp_path):
    results = _results(tmp_path)
    run_id = json.loads((results / "a.jsonl").read_text().splitlines()[0])["run_id"]
    (results / DIAGNOSTICS_DIR).mkdir()
    fifo = results / DIAGNOSTICS_DIR / f"{run_id}.json"
    os.mkfifo(fifo)
    for call in (lambda: _check(results), lambda: _build(results, tmp_path / "site")):
        assert "FIFO" in _refused(_finishes(call, [fifo]))
    assert not (tmp_path / "site").exists()


def test_fifos_as_results_sweep_and_retired_files_do_not_hang(tmp_path):
    results = _results(tmp_path)
    fifos = [results / "c.jsonl", tmp_path / "board.toml"]
    for fifo in fifos:
        os.mkfifo(fifo)
    output = _refused(_finishes(lambda: _check(results), fifos))
    assert "c.jsonl" in output and "FIFO" in output  # reported, not silently left off the board
    (results / "c.jsonl").unlink()
    result = _finishes(lambda: _check(results), fifos)
    assert result.exit_code == 0 and "note: sweep file board.toml" in result.output and "FIFO" in result.output
    os.mkfifo(tmp_path / "retired.toml")
    assert "FIFO" in _error_line(_finishes(lambda: _check(results), [*fifos, tmp_path / "retired.toml"]))


def test_a_diagnostics_file_linked_to_a_device_is_refused_unread(tmp_path):
    results = _results(tmp_path)
    run_id = json.loads((results / "a.jsonl").read_text().splitlines()[0])["run_id"]
    (results / DIAGNOSTICS_DIR).mkdir()
    (results / DIAGNOSTICS_DIR / f"{run_id}.json").symlink_to("/dev/null")  # /dev/zero would never end
    assert "character device" in _refused(_check(results))


def test_an_oversized_results_file_is_refused_by_its_size(tmp_path):
    from harness.records import inputs as reading

    results = _results(tmp_path)
    with open(results / "huge.jsonl", "wb") as f:  # sparse: takes no disk
        f.truncate(reading.RESULTS_LIMIT + 1)
    output = _refused(_check(results))
    assert "huge.jsonl" in output and "more than the 64.0 MiB" in output


def test_the_reader_refuses_a_6_gb_sparse_file_before_reading_a_byte(tmp_path, monkeypatch):
    from harness.records import inputs as reading

    path = tmp_path / "sparse.jsonl"
    with open(path, "wb") as f:
        f.truncate(6 * 1024**3)

    def no_read(*args: Any) -> bytes:
        raise AssertionError("read a file it should have refused by its size")

    monkeypatch.setattr(reading.os, "read", no_read)
    with pytest.raises(reading.FileReadError, match=r"6144\.0 MiB"):
        reading.read_bytes(path, reading.RESULTS_LIMIT)
    with pytest.raises(ValueError, match="character device"):  # the documented error type: a ValueError
        reading.read_text(Path("/dev/zero"), reading.RESULTS_LIMIT)


def test_the_reader_refuses_a_file_that_grows_past_its_limit_while_read(tmp_path, monkeypatch):
    from harness.records import inputs as reading

    path = tmp_path / "growing.toml"
    path.write_text("a = 1\n")
    real_read = os.read
    monkeypatch.setattr(reading.os, "read", lambda fd, n: real_read(fd, n) or b"x" * n)  # never ends
    with pytest.raises(reading.FileReadError, match="grew past"):
        reading.read_bytes(path, 1000)


# --------------------------------------------------------------------------------------
# 3. check passing means build succeeds
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", [1e12, 1e308, 253_402_300_800.0])
def test_a_timestamp_past_year_9999_fails_check_and_build_refuses_it(tmp_path, when):
    results = tmp_path / "results"
    record = make_record("rope", "copy", 0, EM, train_max=2)
    record["timings"]["started_at"] = record["timings"]["finished_at"] = when
    write_jsonl(results / "a.jsonl", [_resealed(record)])
    assert "timings.finished_at" in _refused(_check(results))
    result = _build(results, tmp_path / "site")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output  # not a ValueError
    assert not (tmp_path / "site").exists()


def test_the_latest_allowed_timestamp_builds(tmp_path):
    results = tmp_path / "results"
    record = make_record("rope", "copy", 0, EM, train_max=2)
    record["timings"]["started_at"] = record["timings"]["finished_at"] = 253_402_300_799.0
    write_jsonl(results / "a.jsonl", [_resealed(record)])
    assert _check(results).exit_code == 0
    assert _build(results, tmp_path / "site").exit_code == 0


def test_a_results_file_name_that_is_not_utf8_fails_check_and_build(tmp_path):
    results = _results(tmp_path)
    name = os.fsdecode(b"board-\xff\xfe.jsonl")  # bytes that are not UTF-8: lone surrogates in Python
    (results / "b.jsonl").rename(results / name)
    output = _refused(_check(results))
    assert "not valid UTF-8" in output
    result = _build(results, tmp_path / "site")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert not (tmp_path / "site").exists()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["timings"].update(train_seconds=1e300), "timings.train_seconds"),
        (lambda r: r.update(final_loss=-1.0), "final_loss"),
        (lambda r: r["params"].update(pe=2000, total=1000), "params.pe"),
        (lambda r: r["metrics"][0].update(token_length=1e300), "token_length"),
    ],
)
def test_every_number_of_a_record_is_range_checked(edit, field):
    record = make_record("rope", "copy", 0, EM, train_max=2)
    edit(record)
    problems = validate_record(_resealed(record))
    assert problems and any(field in p for p in problems), problems


# --------------------------------------------------------------------------------------
# 4. metrics against the record's own config
# --------------------------------------------------------------------------------------


def _metric(length: int, split: str, em: float = 1.0, n: int = 8) -> dict[str, Any]:
    right = round(em * n)
    return {"split": split, "length": length, "token_length": 2.0 * length + 3, "n": n, "exact": right,
            "tokens": n, "tokens_right": right}  # fmt: skip


def test_a_metric_at_a_scale_the_config_does_not_evaluate_fails_check(tmp_path):
    record = make_record("rope", "copy", 0, {n: 1.0 for n in range(1, 9)}, train_max=3)  # test_max 8
    record["metrics"].append(_metric(1000, "test"))
    write_jsonl(tmp_path / "results" / "a.jsonl", [_resealed(record)])
    output = _refused(_check(tmp_path / "results"))
    assert "1000" in output and "does not evaluate" in output


def test_a_record_keeping_only_some_scales_fails_check_and_is_not_ranked(tmp_path):
    """The issue's case: rope ranked 1st with EM<=N computed from scale 1 alone."""
    kept = make_record("rope", "copy", 0, {n: 0.0 for n in range(1, 7)}, train_max=5)  # EM 0 everywhere ...
    kept["metrics"] = [_metric(1, "train"), _metric(6, "test")]  # ... but only scales 1 and 6 kept, at EM 1
    full = make_record("nope", "copy", 0, {n: 1.0 for n in range(1, 7)}, train_max=5)
    write_jsonl(tmp_path / "results" / "a.jsonl", [_resealed(kept), full])
    output = _refused(_check(tmp_path / "results"))
    assert "missing" in output and "2, 3, 4, 5" in output
    assert _build(tmp_path / "results", tmp_path / "site").exit_code == 1


def test_a_metric_over_another_sample_count_fails_check():
    record = make_record("rope", "copy", 0, EM, train_max=2)  # eval.samples 8
    record["metrics"][2].update(n=3, exact=1, tokens=3, tokens_right=1)
    problems = validate_record(_resealed(record))
    assert any("eval.samples" in p for p in problems), problems


def test_a_test_stride_config_needs_exactly_its_strided_scales():
    em = {n: 1.0 for n in range(1, 21)}
    record = make_record("rope", "copy", 0, em, train_max=3, eval_options={"test_stride": 5})  # 4, 9, 14, 19, 20
    assert any("does not evaluate" in p for p in validate_record(_resealed(record)))
    record["metrics"] = [m for m in record["metrics"] if m["length"] <= 3 or m["length"] in (4, 9, 14, 19, 20)]
    assert validate_record(_resealed(record)) == []


def test_a_task_not_installed_here_needs_scales_its_config_lists():
    record = make_record("rope", "copy", 0, EM, train_max=2)
    record["task"] = record["config"]["task"] = "plugin_task_not_installed"
    assert validate_record(_resealed(record)) == []
    record["metrics"].append(_metric(9, "test"))
    assert any("does not evaluate" in p for p in validate_record(_resealed(record)))


# --------------------------------------------------------------------------------------
# 5. names reach the terminal escaped
# --------------------------------------------------------------------------------------

HOSTILE_NAMES = ("rope\x1b]0;pwned\x07\x1b[2J", "my\u202eplugin", "nul\x00name")
RAW = ("\x1b", "\x07", "\u202e", "\x00")


def _hostile_records() -> list[dict[str, Any]]:
    out = []
    for i, name in enumerate(HOSTILE_NAMES):
        record = make_record("rope", "copy", i, EM, train_max=2)
        record["pe"] = record["config"]["pe"] = name
        out.append(_resealed(record))
    return out


def test_check_escapes_names_in_its_output(tmp_path):
    write_jsonl(tmp_path / "results" / "a.jsonl", _hostile_records())
    result = _check(tmp_path / "results")
    assert result.exit_code == 0, result.output
    assert "not installed here" in result.output
    assert not any(ch in result.output for ch in RAW), repr(result.output)
    assert "\\x1b]0;pwned\\x07" in result.output and "my\\u202eplugin" in result.output


def test_check_escapes_a_file_name_in_its_errors(tmp_path):
    results = _results(tmp_path)
    (results / "evil\x1b[2J.jsonl").write_text("not json\n")
    output = _refused(_check(results))
    assert "\x1b" not in output and "evil\\x1b[2J.jsonl" in output


def test_pezoo_results_escapes_names(tmp_path):
    results, store = tmp_path / "results", tmp_path / "store.sqlite"
    write_jsonl(results / "a.jsonl", _hostile_records())
    import_results(results, store)
    for fmt in ("table", "csv", "markdown"):
        result = _cli("results", "--store", str(store), "--format", fmt)
        assert result.exit_code == 0, result.output
        assert not any(ch in result.output for ch in RAW), (fmt, repr(result.output))
        assert "my\\u202eplugin" in result.output, fmt


def test_terminal_text_keeps_ordinary_text():
    from harness.commands.printable import terminal_text

    text = "rope → yarn×4 L=22 (same weights) 中文 é\nsecond line"
    assert terminal_text(text) == text
    assert terminal_text("a\nb", keep_newlines=False) == "a\\x0ab"


def test_check_fails_what_build_would_refuse_to_draw(tmp_path):
    """Two encodings whose pages would share a file name: check passed, build refused."""
    records = []
    for name in ("my_pe", "MY_PE"):
        record = make_record("rope", "copy", 0, EM, train_max=2)
        record["pe"] = record["config"]["pe"] = name
        records.append(_resealed(record))
    write_jsonl(tmp_path / "results" / "a.jsonl", records)
    assert "my_pe.html" in _error_line(_check(tmp_path / "results"))
    assert "my_pe.html" in _one_line_error(_build(tmp_path / "results", tmp_path / "site"))
