"""Encoding specs (``name{key=value,...}``): parsing, formatting, resolution, run identity."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cli import main
from harness.config import RunConfig, preset_config
from harness.config.pe_spec import display_name, model_options, resolve_pe
from harness.sweeps.sweep import load_sweep, pe_values
from harness.training.backbone import BackboneConfig
from harness.training.train import build_model
from pezoo.spec import PeSpec, format_pe, parse_pe, parse_value, split_pe_list

QUICK = BackboneConfig(d_model=128, n_layers=3, n_heads=4)


def test_parse_names_options_and_setups():
    assert parse_pe("rope") == PeSpec("rope")
    assert parse_pe(" randomized:rope{max_length=256} ") == PeSpec("randomized:rope", {"max_length": 256})
    spec = parse_pe('prism{paper, layers=[0, 2], regulariser=frobenius, gamma_max=4.0, compile_scan=false, x="a,b"}')
    assert spec.setup == "paper"
    assert spec.options == {
        "layers": [0, 2],
        "regulariser": "frobenius",
        "gamma_max": 4.0,
        "compile_scan": False,
        "x": "a,b",
    }
    assert parse_pe("prism{setup=paper}") == parse_pe("prism{paper}") == PeSpec("prism", {}, "paper")
    assert parse_pe("prism{}") == PeSpec("prism")
    assert parse_value("1e-3") == 0.001 and parse_value("true") is True and parse_value("'q'") == "q"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("prism{n_cursors=4", "unclosed"),
        ("prism{n_cursors=4}}", "unbalanced"),
        ("prism{layers=[0,3}", "unbalanced"),
        ("prism{n_cursors=4,,d_pe=8}", "empty option"),
        ("prism{n_cursors=4,n_cursors=2}", "given twice"),
        ("prism{papr}", "not a setup"),
        ("prism{paper,default}", "two setups"),
        ("prism{3=4}", "not an option name"),
        ("prism{x=@}", "not a value"),
        ("{x=1}", "expected an encoding name"),
        ("prism{x=1}y", "must end with"),
        ("prism{x={a}}", "is not key=value"),
        ("rope@scaling", "after .@. come the evaluation options"),
        ("rope@{a=1}@{b=2}", "one .@. at most"),
    ],
)
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        parse_pe(text)


def test_lists_split_only_at_top_level_commas():
    text = "nope, prism{paper,layers=[0,2]},randomized:rope{max_length=64}, t5"
    assert split_pe_list(text) == ["nope", "prism{paper,layers=[0,2]}", "randomized:rope{max_length=64}", "t5"]
    assert split_pe_list('x{s="a,}b"},y') == ['x{s="a,}b"}', "y"]
    with pytest.raises(ValueError, match="unclosed"):
        split_pe_list("prism{paper,rope")
    # the opener left open is named: it said "unclosed '}'", the closer it expected
    with pytest.raises(ValueError, match=r"unclosed '\{' \(no '\}' after it\)"):
        split_pe_list("rope{")
    with pytest.raises(ValueError, match=r"unclosed '\[' \(no '\]' after it\)"):
        split_pe_list("prism{layers=[0,2")


_values = st.recursive(
    st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, width=64)
    | st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(["rope", "randomized:rope", "prism", "learned_prf_sh"]),
    options=st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), _values, max_size=4),
    setup=st.sampled_from([None, "paper", "default"]),
)
def test_format_parses_back(name, options, setup):
    options.pop("setup", None)
    text = format_pe(name, options, setup)
    assert parse_pe(text) == PeSpec(name, options, setup)
    assert split_pe_list(f"{text},nope") == [text, "nope"]


def test_resolution_checks_options_against_the_encoding():
    name, options = resolve_pe("prism{n_cursors=3}", task="copy", backbone=QUICK)
    assert (name, options) == ("prism", {"n_cursors": 3})
    with pytest.raises(ValueError, match=r"'prism\{n_cursor=3\}'.*unknown option.*n_cursors"):
        resolve_pe("prism{n_cursor=3}", task="copy", backbone=QUICK)
    with pytest.raises(ValueError, match=r"layers .* outside"):
        resolve_pe("prism{layers=[0,7]}", task="copy", backbone=QUICK)
    with pytest.raises(ValueError, match="no paper setup is defined for encoding 'rope'"):
        resolve_pe("rope{paper}", task="copy", backbone=QUICK)
    # the backbone's heads are one width: a hybrid's G layers may not ask for another
    assert resolve_pe("hybrid{pattern=RRG,global_head_dim=32}", task="copy", backbone=QUICK)[0] == "hybrid"
    with pytest.raises(ValueError, match=r"layer 2 q/k heads 16 wide, where .* d_model / n_heads = 32"):
        resolve_pe("hybrid{pattern=RRG,global_head_dim=16}", task="copy", backbone=QUICK)


def test_new_randomized_runs_record_the_paper_procedure_and_get_new_ids():
    new = preset_config("smoke", pe="randomized", task="copy", seed=0)
    assert new.pe_options == {"draw": "per_length", "randomize_eval": True}
    rope = preset_config("smoke", pe="randomized:rope", task="copy", seed=0)
    assert rope.pe_options == {"draw": "per_length", "randomize_eval": True}
    # a run stored before the default changed: no option, evaluated on plain positions
    stored = RunConfig.from_dict({**new.to_dict(), "pe_options": {}})
    plain = preset_config("smoke", pe="randomized{randomize_eval=false,draw=per_batch}", task="copy", seed=0)
    assert stored.run_id() != new.run_id()  # an old result is never taken for the new default
    assert stored.run_id() == plain.run_id()  # the same encoding, the same run
    # a run stored before draw existed: one draw per padded batch, its id unchanged
    published = RunConfig.from_dict({**new.to_dict(), "pe_options": {"randomize_eval": True}})
    shared = preset_config("smoke", pe="randomized{draw=per_batch}", task="copy", seed=0)
    assert published.run_id() == shared.run_id() != new.run_id()
    assert build_model(published).pe.draw == "per_batch" and build_model(new).pe.draw == "per_length"
    assert build_model(new).pe.random_at_eval
    assert not build_model(stored).pe.random_at_eval and not build_model(plain).pe.random_at_eval
    assert model_options("randomized", {}) == {"draw": "per_batch", "randomize_eval": False}
    assert model_options("rope", {}) == {}
    # the id of a run without options is what it always was (no key is added to its hash)
    rope = preset_config("smoke", pe="rope", task="copy", seed=0)
    assert rope.pe_options == {}
    assert rope.run_id() == "2da2d3b03c40c983"


def test_display_names_show_options_not_harness_defaults():
    assert display_name("rope", {}) == "rope"
    assert display_name("randomized", {"draw": "per_length", "randomize_eval": True}) == "randomized:ape"
    assert display_name("randomized", {"randomize_eval": True}) == "randomized:ape{draw=per_batch}"
    assert display_name("randomized", {}) == "randomized:ape{draw=per_batch,randomize_eval=false}"
    assert display_name("prism", {"n_cursors": 4, "regulariser": "frobenius"}) == (
        "prism{n_cursors=4,regulariser=frobenius}"
    )
    cfg = preset_config("quick", pe="prism{paper}", task="reverse", seed=0)
    assert display_name(cfg.pe, cfg.pe_options, task="reverse", backbone=cfg.backbone) == "prism{paper}"
    assert display_name(cfg.pe, cfg.pe_options, task="reverse", backbone=cfg.to_dict()["backbone"]) == "prism{paper}"
    assert display_name(cfg.pe, cfg.pe_options) == format_pe("prism", cfg.pe_options)  # no task: spelled out
    cfg = preset_config("quick", pe="prism{paper,regulariser=frobenius}", task="reverse", seed=0)
    assert display_name(cfg.pe, cfg.pe_options, task="reverse", backbone=cfg.backbone) == (
        "prism{paper,regulariser=frobenius}"
    )
    cfg = preset_config("quick", pe="prism{paper,n_cursors=2}", task="reverse", seed=0)
    shown = display_name(cfg.pe, cfg.pe_options, task="reverse", backbone=cfg.backbone)
    assert "paper" not in shown and "n_cursors=2" in shown  # no longer the paper's setup


def test_sweep_files_take_spec_strings_and_tables(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'preset = "smoke"\ntask = ["copy", "reverse"]\n'
        'pe = ["rope", "prism{paper}", {name = "prism", n_cursors = 3, layers = [0]}, "nope, t5"]\n'
    )
    spec = load_sweep(path)
    assert [str(p) for p in spec.grids[0].pe] == ["rope", "prism{paper}", "prism{layers=[0],n_cursors=3}", "nope", "t5"]
    assert spec.names()[0] == ["rope", "prism", "nope", "t5"]
    configs = spec.configs()
    options = {(c.task, json.dumps(c.pe_options, sort_keys=True)) for c in configs if c.pe == "prism"}
    assert len(options) == 4  # the paper setup differs per task; the explicit one does not
    assert [str(p) for p in pe_values({"name": "prism", "setup": "paper"})] == ["prism{paper}"]
    with pytest.raises(ValueError, match="needs name"):
        pe_values({"n_cursors": 3})
    path.write_text('preset = "smoke"\ntask = "copy"\npe = ["prism{n_cursor=3}"]\n')
    with pytest.raises(ValueError, match="unknown option"):
        load_sweep(path).configs()


def test_bench_rejects_bad_options_before_a_store_exists(tmp_path):
    store = tmp_path / "s.sqlite"
    for pe, message in (("prism{n_cursor=4}", "unknown option"), ("prism{n_cursors=4", "unclosed")):
        result = CliRunner().invoke(main, ["bench", "--pe", pe, "--task", "copy", "--preset", "smoke", "--store",
                                           str(store)])  # fmt: skip
        assert result.exit_code == 2 and message in result.output, result.output
    assert not store.exists()
