"""Hostile or careless results and diagnostics files: a clear ResultsError naming the file, never a
traceback, and never a record that passes `check` but breaks a store or the site later."""

from __future__ import annotations

import copy
import dataclasses
import json
import reprlib

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from leaderboard_fixtures import make_record, sha256_of_canonical, write_jsonl

from harness.cli import main
from harness.config import RunConfig
from harness.records.identity import config_run_id
from harness.records.record import RunRecord, diagnostics_problem
from harness.records.store import Store
from leaderboard.export import import_results
from leaderboard.schema import (
    ResultsError,
    read_diagnostics,
    read_file,
    read_results,
    validate_record,
)

EM = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.2, 5: 0.0, 6: 0.0, 7: 0.0}


def good(pe: str = "rope", seed: int = 0) -> dict:
    return make_record(pe, "copy", seed, EM, train_max=3)


def resealed(record: dict, *, rehash: bool = True) -> dict:
    """``record`` made self-consistent again after an edit: run_id recomputed from the config
    dict by the schema's rule, checksum recomputed (what a careful forger would do)."""
    record = copy.deepcopy(record)
    if rehash and isinstance(record.get("config"), dict):
        record["run_id"] = config_run_id(record["config"])
    try:
        record["checksum"] = sha256_of_canonical(record)
    except ValueError:  # NaN somewhere: no canonical JSON, the old checksum stays
        pass
    return record


def edited(path: str, value, record: dict | None = None) -> dict:
    record = copy.deepcopy(record or good())
    *parents, last = path.split(".")
    target = record
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return resealed(record)


def check(results) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["leaderboard", "check", "--results", str(results)])
    return result.exit_code, result.output


# --------------------------------------------------------------------------------------
# Records: the config is a RunConfig, integers fit SQLite, the version is an int
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        # the case: passes, imports, then `pezoo results` fails with KeyError 'eval'
        ("config.eval", KeyError, "config does not describe run"),
        ("config.backbone", KeyError, "config does not describe run"),
        ("config.train.lr", "fast", "config: train.lr must be a number"),
        ("config.train.steps", 0, "config: train.steps must be an integer >= 1"),
        ("config.eval.samples", -1, "config: eval.samples must be an integer >= 1"),
        ("config.eval.test_stride", 0, "config: eval.test_stride must be an integer >= 1"),
        ("config.backbone.d_model", 31, "config: backbone.d_model=31 is not divisible"),
        ("config.train.nosuch", 1, "config: unknown train config key(s) nosuch"),
        ("config.train.grad_clip", 1, "config does not describe run"),  # 1.0 written as 1
        ("config.train.steps", 20.0, "config: train.steps must be an integer"),
        ("schema_version", 2.0, "schema_version must be 2 (an integer)"),
        ("schema_version", True, "schema_version must be 2 (an integer)"),
        ("params.total", 2**63, "params.total must be"),
        ("params.pe", 10**30, "params.pe must be"),
        ("metrics.0.n", 2**63, "metrics[0].n must be"),
        ("metrics.0.length", 2**64, "metrics[0].length must be"),
        ("final_loss", 10**400, "final_loss must be"),
        ("timings.train_seconds", 10**400, "timings.train_seconds must be"),
        ("metrics.0.token_length", 10**400, "metrics[0].token_length must be"),
        # round four: options the encoding refuses, which `bench` never trains, passed check and import
        ("config.pe_options", {"base": -5.0}, "config: encoding 'rope{base=-5.0}': rope: base must be a finite"),
        ("config.pe_options", {"layout": 3}, "rope: layout must be a string, got 3 (int)"),
        ("config.eval_pe_options", {"scaling": {"rope_type": "yarn", "factor": 4.0}}, "original_max_position"),
    ],
    ids=lambda v: reprlib.repr(v) if not isinstance(v, str) or "." in v else "",
)
def test_a_record_whose_config_or_numbers_would_break_a_store_is_refused(path, value, reason):
    problems = validate_record(edited(path, value))
    assert any(reason in p for p in problems), problems


def test_a_seed_beyond_sqlite_is_refused():
    record = good()
    record["seed"] = record["config"]["seed"] = 2**63
    problems = validate_record(resealed(record))
    assert any("largest integer SQLite stores" in p for p in problems), problems


def test_older_records_without_the_later_fields_still_pass():
    record = good()
    for key in ("every", "start_below_loss", "select", "window", "window_jump", "match"):
        del record["config"]["eval"][key]
    assert validate_record(resealed(record)) == []


def test_a_record_without_eval_is_refused_by_check_and_import_and_creates_no_store(tmp_path):
    results = tmp_path / "results"
    path = write_jsonl(results / "r.jsonl", [good("nope"), edited("config.eval", KeyError)])
    code, output = check(results)
    assert code == 1 and f"{path}:2: config does not describe run" in output
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(main, ["leaderboard", "import", "--results", str(results), "--store", str(store)])
    assert result.exit_code == 1 and f"{path}:2:" in result.output
    assert not store.exists()


def test_import_is_one_transaction(tmp_path, monkeypatch):
    """A record that validates but cannot be written (here: forced) leaves the store as it was."""
    results = tmp_path / "results"
    write_jsonl(results / "a.jsonl", [good("nope")])
    second = write_jsonl(results / "b.jsonl", [good("alibi"), good("rope")])
    real = RunRecord.from_dict

    def overflowing(body, diagnostics=None):
        record = real(body, diagnostics)
        if record.pe == "rope":  # SQLite: OverflowError, after two runs were inserted
            return dataclasses.replace(record, n_params=2**63)
        return record

    monkeypatch.setattr(RunRecord, "from_dict", staticmethod(overflowing))
    store = tmp_path / "store.sqlite"
    with pytest.raises(ResultsError) as info:
        import_results(results, store)
    assert info.value.problems[0][:2] == (second, 2) and "nothing was imported" in str(info.value)
    with Store(store) as s:
        assert s.runs() == []


def test_check_notes_encodings_that_are_not_installed(tmp_path):
    record = good()
    record["pe"] = record["config"]["pe"] = "my_plugin_pe"
    write_jsonl(tmp_path / "r.jsonl", [resealed(record)])
    code, output = check(tmp_path)
    assert code == 0 and "valid" in output
    assert "note: encoding(s) my_plugin_pe are not installed here" in output


def test_check_knows_a_combination_of_installed_encodings(tmp_path):
    records = []
    for name in ("abacus+fire", "abacus+my_plugin_pe"):
        record = good()
        record["pe"] = record["config"]["pe"] = name
        record["seed"] = record["config"]["seed"] = len(records)
        records.append(resealed(record))
    write_jsonl(tmp_path / "r.jsonl", records)
    code, output = check(tmp_path)
    assert code == 0 and "valid" in output
    assert "note: encoding(s) abacus+my_plugin_pe are not installed here" in output  # abacus+fire is


# --------------------------------------------------------------------------------------
# Nesting: deep JSON is a ResultsError, never a RecursionError
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deeply_nested_json_is_a_results_error(tmp_path, depth):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * depth + "]" * depth + "\n")
    _, problems = read_file(path)
    assert problems == [(path, 1, "not valid JSON here (nested more than 32 levels deep)")]
    code, output = check(tmp_path)
    assert code == 1 and f"{path}:1: not valid JSON here" in output


# --------------------------------------------------------------------------------------
# Diagnostics files: types and ranges, checked by `check`, `import` and `build`
# --------------------------------------------------------------------------------------


def diagnostics(scale=7, train_max=3, support=4) -> dict:
    modes, conf = [[[0, 1, 2]], [[0, -1, -4]]], [[[0.5, 0.9, 1.0]], [[1.0, 0.25, 0.0]]]  # (h=2, c=1, s=3)
    layer = {"layer": 0, "support": support, "query_modes": modes, "key_modes": copy.deepcopy(modes),
             "query_confidence": conf, "key_confidence": copy.deepcopy(conf)}  # fmt: skip
    return {"version": 1, "scale": scale, "train_max": train_max, "tokens": ["<bos>", "a", "="], "layers": [layer]}


def with_diagnostics(tmp_path, body, name: str | None = None):
    record = good("prism")
    results = tmp_path / "results"
    write_jsonl(results / "r.jsonl", [record])
    folder = results / "diagnostics"
    folder.mkdir()
    path = folder / f"{name or record['run_id']}.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body))
    return results, path, record


def test_valid_diagnostics_pass_check(tmp_path):
    results, _, record = with_diagnostics(tmp_path, diagnostics())
    assert diagnostics_problem(diagnostics(), record["config"]) is None
    code, output = check(results)
    assert code == 0 and "1 diagnostics file(s): valid" in output, output


def _set(path: str, value):
    body = diagnostics()
    *parents, last = path.split(".")
    target = body
    for p in parents:
        target = target[int(p)] if p.isdigit() else target[p]
    if value is KeyError:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return body


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (_set("scale", '8"><img src=x onerror=alert(1)>'), "scale must be"),
        (_set("scale", 0), "scale must be"),
        (_set("scale", 7.5), "scale must be"),
        (_set("scale", True), "scale must be"),
        (_set("scale", 2), "scale 2 must exceed train_max 3"),
        (_set("scale", 99), "scale 99 is beyond its run's largest test scale (7)"),
        (_set("train_max", "3"), "train_max must be"),
        (_set("train_max", 2), "train_max 2 is not its run's (3)"),
        (_set("version", 1.0), "not a version-1 diagnostics object"),
        (_set("tokens", ["a", 1, "b"]), "tokens must be a non-empty list of strings"),
        (_set("layers.0.query_modes.0.0.1", "1"), "layers[0]: query_modes must be integer offsets in -4..4"),
        (_set("layers.0.key_modes.0.0.1", 1.5), "layers[0]: key_modes must be integer offsets in -4..4"),
        (_set("layers.0.query_modes.0.0.1", 5), "layers[0]: query_modes must be integer offsets in -4..4"),
        (_set("layers.0.query_modes.0.0", [0, 1]), "layers[0]: query_modes must be (heads, cursors, 3)"),
        (_set("layers.0.query_confidence.0.0.1", 1.5), "layers[0]: query_confidence must be probabilities"),
        (_set("layers.0.key_confidence.0.0.1", "high"), "layers[0]: key_confidence must be probabilities"),
        (_set("layers.0.key_confidence", [[[1.0, 1.0, 1.0]]]), "layers[0]: key_confidence must have the shape"),
        (_set("layers.0.support", 0), "layers[0]: support must be an integer >= 1"),
        (_set("layers.0.layer", "<b>0</b>"), "layers[0]: layer must be"),
        (_set("layers.0.extra", 1), "layers[0]: unknown key(s) extra"),
        (_set("note", "hi"), "diagnostics: unknown key(s) note"),
        (_set("layers.0.support", KeyError), "layers[0]: missing key(s) support"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_malformed_diagnostics_are_refused_by_check_with_their_path(tmp_path, body, reason):
    results, path, record = with_diagnostics(tmp_path, body)
    problem = diagnostics_problem(body, record["config"])
    assert problem is not None and reason in problem
    code, output = check(results)
    assert code == 1 and f"{path}:1: {reason}" in output, output


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 32 levels deep"),
        ('{"version": 1, "scale": NaN}', "NaN is not allowed"),
        ("{not json", "not valid JSON"),
    ],
    ids=["deep", "nan", "not-json"],
)
def test_unreadable_diagnostics_are_results_errors(tmp_path, text, reason):
    results, path, _ = with_diagnostics(tmp_path, text)
    with pytest.raises(ResultsError) as info:
        read_diagnostics(results, read_results(results))
    assert info.value.problems[0][0] == path and reason in info.value.problems[0][2]


def test_diagnostics_of_no_published_run_are_refused(tmp_path):
    results, path, _ = with_diagnostics(tmp_path, diagnostics(), name="0123456789abcdef")
    code, output = check(results)
    assert code == 1 and f"{path}:0: no published run has run_id '0123456789abcdef'" in output


def test_build_refuses_a_string_where_the_plot_needs_numbers(tmp_path):
    """Today: TypeError deep in the SVG code. Now: the path and what is wrong, and no site."""
    results, path, _ = with_diagnostics(tmp_path, _set("layers.0.query_modes.0.0.1", "x"))
    out = tmp_path / "site"
    result = CliRunner().invoke(main, ["leaderboard", "build", "--results", str(results), "--out", str(out)])
    assert result.exit_code == 1 and not isinstance(result.exception, TypeError)
    assert f"{path}:1: layers[0]: query_modes must be integer offsets" in result.output
    assert not (out / "index.html").exists()


def test_import_refuses_malformed_diagnostics_and_imports_nothing(tmp_path):
    results, path, _ = with_diagnostics(tmp_path, _set("scale", "8"))
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(main, ["leaderboard", "import", "--results", str(results), "--store", str(store)])
    assert result.exit_code == 1 and str(path) in result.output
    assert not store.exists()


# --------------------------------------------------------------------------------------
# Fuzzing: random JSON in a results line, a record or a diagnostics file gives problems
# (read_file, validate_record: lists of reasons; read_results/read_diagnostics: ResultsError),
# never another exception
# --------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, -(2**63) - 1, 10**400])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


RECORD_PATHS = [p for p in _paths(good()) if p]
DIAGNOSTICS_PATHS = [p for p in _paths(diagnostics()) if p]


def _replaced(value, path, new, delete):
    value = copy.deepcopy(value)
    target = value
    for p in path[:-1]:
        target = target[p]
    if delete and isinstance(target, dict):
        del target[path[-1]]
    else:
        target[path[-1]] = new
    return value


def _line(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)  # NaN written as NaN


def _read(tmp_path_factory, text: str):
    path = tmp_path_factory.mktemp("fuzz") / "r.jsonl"
    path.write_text(text, encoding="utf-8")
    records, problems = read_file(path)
    assert bool(records) != bool(problems)  # one line: a record or its problems
    if problems:
        with pytest.raises(ResultsError):
            read_results(path.parent)
    else:
        assert [r.data for r in read_results(path.parent)] == [r.data for r in records]
    for record in records:  # what passes is a usable run
        assert RunConfig.from_dict(record.data["config"]).run_id() == record.run_id
        assert all(0 <= m["exact"] <= m["n"] for m in record.data["metrics"])
    return records, problems


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
def test_random_json_lines_give_problems_never_exceptions(tmp_path_factory, value):
    _, problems = _read(tmp_path_factory, _line(value) + "\n")
    assert problems


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(RECORD_PATHS), value=JSON, delete=st.booleans(), rehash=st.booleans())
def test_random_json_inside_a_record_gives_problems_never_exceptions(tmp_path_factory, path, value, delete, rehash):
    record = resealed(_replaced(good(), path, value, delete), rehash=rehash)
    validate_record(record)  # a list of reasons, whatever the record holds
    _read(tmp_path_factory, _line(record) + "\n")


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(DIAGNOSTICS_PATHS), value=JSON, delete=st.booleans())
def test_random_json_inside_diagnostics_gives_a_problem_never_an_exception(path, value, delete):
    record = good("prism")
    body = _replaced(diagnostics(), path, value, delete)
    problem = diagnostics_problem(body, record["config"])
    assert problem is None or isinstance(problem, str)
    assert diagnostics_problem(value) is not None or value == diagnostics()


def test_resolved_options_in_provenance_must_be_an_object_that_agrees_with_the_config():
    record = edited("config.pe_options", {"base": 500.0})
    assert validate_record(record) == []
    ok = edited("provenance.pe_options_resolved", {"base": 500.0, "layout": "interleaved"}, record)
    assert validate_record(ok) == []
    assert validate_record(edited("provenance.pe_options_resolved", "base=500.0", record))
    assert validate_record(edited("provenance.pe_options_resolved", {"base": 10000.0}, record))


@pytest.mark.parametrize("text", ["a\x00b", "a\x1b[31mred", "two\nlines", "a\u202eevil", "zero\u200bwidth"])
def test_provenance_is_plain_text_without_control_or_format_characters(text):
    # a NUL, an escape, a newline and a bidi override went verbatim into the site and README
    problems = validate_record(edited("provenance.commit", text))
    assert any("control or format characters" in p and "'commit'" in p for p in problems), problems
    assert validate_record(edited("provenance.commit", "0e68113b52ad, naïve café ✓")) == []  # unicode is fine
