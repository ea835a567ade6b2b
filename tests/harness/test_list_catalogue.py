"""`pezoo list` (harness/commands/catalogue.py) and what a wrong encoding or preset name is told."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import pezoo
from harness.cli import main
from harness.commands.catalogue import name_problem, summary
from harness.config import PRESET_DESCRIPTIONS, PRESETS
from harness.config.pe_spec import display_name


def sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith(" "):
            out[line.split(" ")[0].rstrip(":")] = current = []
        else:
            current.append(line.strip())
    return out


def test_list_gives_a_section_per_kind_and_a_line_per_entry():
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    listed = sections(result.output)
    assert list(listed) == ["encodings", "tasks", "lm_tasks", "presets", "backends"]
    assert [line.split()[0] for line in listed["lm_tasks"]] == ["lm_en", "lm_code"]
    header = result.output.splitlines()[0]
    assert header.startswith("encodings (wrapped by ")
    assert header.endswith("join names with + to combine: abacus+fire):")
    assert "r = randomized:NAME" in header and "s = ssmax:NAME" in header  # one letter per wrapper
    rows = {line.split()[0]: line for line in listed["encodings"]}
    assert set(rows) == set(pezoo.base.ENCODINGS)
    # rope can be randomized, hard_alibi cannot (pezoo.create refuses it); each with its docstring's first line
    assert "r" in rows["rope"].split()[1] and "Rotary position embedding (Su et al. 2021" in rows["rope"]
    assert "r" not in rows["hard_alibi"].split()[1] and rows["hard_alibi"].split()[2] == "Hard-ALiBi:"
    for prefix in pezoo.WRAPPERS:
        mark = prefix[0]
        assert all((mark in row.split()[1]) == (f"{prefix}:{name}" in pezoo.available()) for name, row in rows.items())
    assert [line.split()[0] for line in listed["tasks"]][:2] == ["addition", "addition_turing"]
    assert "Copy a string of n i.i.d. uniform digits" in result.output
    presets = {line.split()[0]: line for line in listed["presets"]}
    assert list(presets) == list(PRESETS)
    assert all(PRESET_DESCRIPTIONS[name] in line for name, line in presets.items())


def test_every_preset_has_a_description_and_long_docstrings_are_cut_at_a_word():
    assert set(PRESET_DESCRIPTIONS) == set(PRESETS) and all(PRESET_DESCRIPTIONS.values())

    class Long:
        """One two three four five six seven eight
        nine ten.

        Not this paragraph."""

    assert summary(Long) == "One two three four five six seven eight nine ten."
    assert summary(Long, width=30) == "One two three four five ..."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "rope", "--preset", "quik"], "unknown preset 'quik'. Did you mean 'quick'?"),
        (["--pe", "randomized:hard_alibi"], "encoding 'hard_alibi' declares itself not wrappable (see its docstring)"),
        (["--pe", "randomized:nope"], "encoding 'nope' does not read positions"),
        (["--pe", "randomized:randomized"], "'randomized' is already randomized"),
        (["--pe", "randomized:ropee"], "Did you mean 'randomized:rope'"),
    ],
)
def test_bad_names_say_why_before_anything_is_written(tmp_path, args, message):
    store = tmp_path / "s.sqlite"
    result = CliRunner().invoke(main, ["bench", *args, "--task", "copy", "--store", str(store)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not store.exists()


def test_the_python_api_gives_the_same_reason():
    with pytest.raises(ValueError, match="declares itself not wrappable"):
        pezoo.create("randomized:hard_alibi", dims=pezoo.ModelDims(32, 2, 1))
    assert "Randomized wraps: alibi, ape" in name_problem("encoding", "randomized:hard_alibi", pezoo.available())


def test_bare_randomized_is_shown_as_the_wrapper_around_sin_cos_ape():
    new = {"draw": "per_length", "randomize_eval": True}
    assert display_name("randomized", new) == "randomized:ape"
    assert display_name("randomized", {}) == "randomized:ape{draw=per_batch,randomize_eval=false}"
    assert display_name("randomized:rope", new) == "randomized:rope"
