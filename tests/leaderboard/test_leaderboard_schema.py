"""The results schema: valid records pass; malformed or edited files fail with path, line and reason."""

from __future__ import annotations

import copy
import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from leaderboard_fixtures import make_record, sha256_of_canonical, without_later_defaults, write_jsonl

from harness.config import LM_PRESETS, PRESETS, preset_config
from harness.records.identity import config_run_id
from leaderboard.schema import ResultsError, read_file, read_results, validate_record

EM = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.2, 5: 0.0, 6: 0.0, 7: 0.0}


def good() -> dict:
    return make_record("rope", "copy", 0, EM, train_max=3)


def test_a_hand_made_valid_record_passes():
    assert validate_record(good()) == []


@settings(max_examples=25, deadline=None)
@given(
    preset=st.sampled_from(sorted(set(PRESETS) - set(LM_PRESETS))),
    pe=st.sampled_from(["nope", "rope", "alibi", "randomized:rope"]),
    task=st.sampled_from(["copy", "reverse", "addition"]),
    seed=st.integers(0, 10_000),
)
def test_run_id_rule_is_the_harness_rule(preset, pe, task, seed):
    """The schema's run_id (recomputed on the plain dict) equals RunConfig.run_id, JSON round trip included."""
    cfg = preset_config(preset, pe=pe, task=task, seed=seed)
    assert config_run_id(json.loads(json.dumps(cfg.to_dict()))) == cfg.run_id()
    # and equals the written-out rule: sha256 of the canonical JSON without the preset (and
    # without the later config fields at their defaults), first 16 hex
    d = json.loads(json.dumps(cfg.to_dict()))
    d.pop("preset")
    d = without_later_defaults(d)
    blob = json.dumps(d, sort_keys=True, separators=(",", ":")).encode()
    assert cfg.run_id() == hashlib.sha256(blob).hexdigest()[:16]


@pytest.mark.parametrize(
    "spec",
    [
        "randomized{randomize_eval=false}",
        "randomized{draw=per_batch}",
        "randomized{draw=per_batch,randomize_eval=false}",
        "randomized:rope{randomize_eval=false}",
    ],
)
def test_run_id_rule_leaves_out_options_at_their_stored_meaning_as_the_harness_does(spec):
    """An option spelled out at what its absence meant in a stored run is left out of the
    harness's run id; the schema kept it, so such a finished run failed export's id check,
    and the whole export with it, every time."""
    cfg = preset_config("smoke", pe=spec, task="copy", seed=0)
    assert config_run_id(json.loads(json.dumps(cfg.to_dict()))) == cfg.run_id()


def _edit(path: str, value):
    def apply(rec: dict) -> dict:
        rec = copy.deepcopy(rec)
        *parents, last = path.split(".")
        target = rec
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is KeyError:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value
        rec["checksum"] = sha256_of_canonical(rec)  # re-sealed: the field check itself must catch it
        return rec

    return apply


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (_edit("schema_version", 3), "newer than this pezoo reads"),
        (_edit("schema_version", "2"), "schema_version must be 2"),
        (_edit("status", "failed"), "status must be 'finished'"),
        (_edit("seed", 3), "seed is 3 but config.seed is 0"),
        (_edit("pe", "alibi"), "pe is 'alibi' but config.pe is 'rope'"),
        (_edit("config.train.steps", 999), "does not match its config"),
        (_edit("run_id", "XYZ"), "16 lowercase hex"),
        (_edit("provenance.commit", KeyError), "provenance: missing key(s) commit"),
        (_edit("provenance.device", 3), "must be strings"),
        (_edit("params.total", -1), "params.total must be"),
        (_edit("timings.finished_at", 1.0), "finished_at is before started_at"),
        (_edit("final_loss", "low"), "final_loss must be"),
        (_edit("metrics.2.exact", 10**9), "metrics[2].exact must be at most"),
        (_edit("metrics.2.exact", True), "metrics[2].exact must be an integer"),
        (_edit("metrics.0.split", "test"), "length 1 is marked 'test' but train_max is 3"),
        (_edit("metrics.5.length", 2), "sorted by length, each length once"),
        (_edit("metrics.1.n", 0), "metrics[1].n must be an integer >= 1"),
        (_edit("metrics.1.extra", 0), "metrics[1]: unknown key(s) extra"),
        (_edit("metrics", []), "metrics must be a non-empty list"),
        (_edit("comment", "nice run"), "unknown key(s) comment; valid keys:"),
        (_edit("timings", KeyError), "missing key(s) timings"),
    ],
)
def test_each_malformation_is_named(edit, reason):
    problems = validate_record(edit(good()))
    assert any(reason in p for p in problems), problems


def test_an_edited_value_breaks_the_checksum():
    rec = good()
    rec["metrics"][4]["exact"] = rec["metrics"][4]["n"]  # a hand edit that is otherwise well-formed
    problems = validate_record(rec)
    assert problems == ["checksum mismatch: the line was edited after export (re-export it from the store)"]


def test_file_errors_carry_path_and_line(tmp_path):
    a, b = good(), make_record("nope", "copy", 1, EM, train_max=3)
    b["metrics"][3]["tokens_right"] -= 1  # edited by hand
    path = write_jsonl(tmp_path / "r.jsonl", [a, b])
    with pytest.raises(ResultsError) as info:
        read_results(tmp_path)
    assert info.value.problems == [(path, 2, "checksum mismatch: the line was edited after export (re-export it "
                                             "from the store)")]  # fmt: skip
    assert f"{path}:2: checksum mismatch" in str(info.value)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("{not json}\n", 1, "not valid JSON"),
        ("[1, 2]\n", 1, "must be a JSON object"),
        ("GOOD\n\nGOOD2\n", 2, "empty line"),
        ("GOOD", 1, "must end with a newline"),
        ("", 0, "empty file"),
    ],
)
def test_malformed_text(tmp_path, text, line, reason):
    rec = good()
    text = text.replace("GOOD2", json.dumps(make_record("nope", "copy", 1, EM, train_max=3), sort_keys=True,
                                            separators=(",", ":")))  # fmt: skip
    text = text.replace("GOOD", json.dumps(rec, sort_keys=True, separators=(",", ":")))
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    _, problems = read_file(path)
    assert any(p == path and n == line and reason in r for p, n, r in problems), problems


def test_nan_is_refused(tmp_path):
    text = json.dumps(good(), sort_keys=True, separators=(",", ":")).replace('"final_loss":0.25', '"final_loss":NaN')
    (tmp_path / "nan.jsonl").write_text(text + "\n")
    with pytest.raises(ResultsError, match="NaN is not allowed"):
        read_results(tmp_path)


def test_pretty_printed_line_is_refused(tmp_path):
    """Same values, but re-serialised (e.g. by an editor): not the exported form."""
    (tmp_path / "pretty.jsonl").write_text(json.dumps(good(), sort_keys=False) + "\n")
    with pytest.raises(ResultsError, match="not in canonical form"):
        read_results(tmp_path)


def test_not_utf8(tmp_path):
    (tmp_path / "latin.jsonl").write_bytes(b'{"a": "\xe9"}\n')
    with pytest.raises(ResultsError, match="not UTF-8"):
        read_results(tmp_path)


def test_a_run_published_twice_is_refused_at_its_second_place(tmp_path):
    rec = good()
    write_jsonl(tmp_path / "a.jsonl", [rec])
    second = write_jsonl(tmp_path / "b.jsonl", [make_record("nope", "copy", 1, EM, train_max=3), rec])
    with pytest.raises(ResultsError) as info:
        read_results(tmp_path)
    [(path, line, reason)] = info.value.problems
    assert (path, line) == (second, 2) and reason.startswith(f"run {rec['run_id']} is already published at ")


def test_other_files_are_ignored_and_a_missing_folder_is_empty(tmp_path):
    (tmp_path / "notes.txt").write_text("not results")
    write_jsonl(tmp_path / "a.jsonl", [good()])
    assert [r.run_id for r in read_results(tmp_path)] == [good()["run_id"]]
    assert read_results(tmp_path / "missing") == []


def test_a_line_removed_from_an_exported_file_is_noticed(tmp_path):
    """Every line stays valid on its own, so only the file name, which carries the digest
    of the run ids it was exported with, shows that a bad merge (or a copy cut at a
    newline) dropped a published run."""
    records = [make_record("nope", "copy", seed, EM, train_max=3) for seed in range(3)]
    path = write_jsonl(tmp_path / "smoke-20261124-000000000000.jsonl", records)
    assert read_results(tmp_path)  # as exported: fine
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:1] + lines[2:]), encoding="utf-8")
    with pytest.raises(ResultsError) as info:
        read_results(tmp_path)
    [(where, line, reason)] = info.value.problems
    assert (where, line) == (path, 0)
    assert "holds other runs than it was exported with" in reason and "line was removed or added" in reason
    # and one added by hand, valid on its own, shows the same way
    path.write_text("".join(lines), encoding="utf-8")
    extra = make_record("rope", "copy", 0, EM, train_max=3)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(extra, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n")
    with pytest.raises(ResultsError, match="holds other runs"):
        read_results(tmp_path)


def test_crlf_line_endings_are_named_as_such(tmp_path):
    # the third probe: a checkout with core.autocrlf was told "not in canonical form (sorted keys, no spaces)"
    path = write_jsonl(tmp_path / "a.jsonl", [good()])
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    with pytest.raises(ResultsError) as info:
        read_results(tmp_path)
    [(_, line, reason)] = info.value.problems
    assert line == 1 and "CRLF" in reason and "canonical form" not in reason


def _reused(source: dict, **changes) -> dict:
    """A run testing ``source``'s training further (to 9), evaluated on its kept weights."""
    rec = make_record(source["pe"], source["task"], source["seed"], {**EM, 8: 0.0, 9: 0.0}, train_max=3)
    rec["provenance"] = {**rec["provenance"], "weights_from": source["run_id"]}
    rec.update(changes)
    rec["checksum"] = sha256_of_canonical(rec)
    return rec


def test_a_run_on_kept_weights_needs_the_run_that_kept_them_published(tmp_path):
    # the third probe: a reused run whose weights_from run is published nowhere passed check
    trained = good()
    write_jsonl(tmp_path / "a.jsonl", [_reused(trained)])
    with pytest.raises(ResultsError, match=f"kept weights of run '{trained['run_id']}'.*which is not published"):
        read_results(tmp_path)
    write_jsonl(tmp_path / "b.jsonl", [trained])
    assert len(read_results(tmp_path)) == 2  # with it: fine


def test_a_run_on_kept_weights_must_match_the_run_that_kept_them(tmp_path):
    other_seed = make_record("rope", "copy", 1, EM, train_max=3)
    reused = _reused(good())
    reused["provenance"]["weights_from"] = other_seed["run_id"]  # names seed 1's run, trains as seed 0's
    reused["checksum"] = sha256_of_canonical(reused)
    write_jsonl(tmp_path / "a.jsonl", [other_seed, reused])
    with pytest.raises(ResultsError, match="which did not train as this run would"):
        read_results(tmp_path)
    write_jsonl(tmp_path / "a.jsonl", [good(), _reused(good(), final_loss=0.5)])
    with pytest.raises(ResultsError, match="its final_loss is not that run's"):
        read_results(tmp_path)
