"""Combinations on the command line: ``pezoo bench --pe abacus+fire`` trains, the parts
get their harness inputs (Abacus its digit ids), and a wrong part is named."""

from __future__ import annotations

from click.testing import CliRunner

from harness.cli import main
from harness.config import preset_config
from harness.config.pe_spec import vocabulary_options
from harness.tasks.vocab import TOKEN_ID
from harness.training.train import build_model
from pezoo.spec import parse_pe

ARGS = ["bench", "--task", "addition", "--preset", "smoke", "--device", "cpu", "--workers", "1", "--steps", "3"]


def test_a_combination_trains_and_its_abacus_part_gets_the_digits(tmp_path):
    result = CliRunner().invoke(main, [*ARGS, "--pe", "abacus+fire{max_k=20}", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 0, result.output
    assert "abacus+fire{max_k=20} on addition seed 0: finished" in result.output
    cfg = preset_config("smoke", pe="abacus+fire{max_k=20}", task="addition", seed=0)
    pe = build_model(cfg).pe
    assert list(pe.parts[0].digit_ids) == [TOKEN_ID[str(d)] for d in range(10)] and pe.parts[0].max_k == 20
    assert vocabulary_options("randomized:rope+abacus") == {"digit_ids": list(pe.parts[0].digit_ids)}
    assert parse_pe("randomized:abacus+fire{max_length=64}").name == "randomized:abacus+fire"


def test_a_wrong_part_is_named(tmp_path):
    result = CliRunner().invoke(main, [*ARGS, "--pe", "abacus+fyre", "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2 and "unknown encoding 'fyre'. Did you mean 'fire'?" in result.output
    assert not (tmp_path / "s.sqlite").exists()


def test_a_combination_of_known_parts_that_cannot_be_combined_says_why(tmp_path):
    """Every part registered, the combination refused: the reason pezoo.create gives (it read
    "unknown encoding 'abacus+abacus'. Did you mean 'abacus'?", as if a part were misspelt)."""
    for pe, why in [
        ("abacus+abacus", "abacus appears twice; each part keeps its own state, once"),
        ("rope+xpos", "rope and xpos both transform queries and keys"),
    ]:
        result = CliRunner().invoke(main, [*ARGS, "--pe", pe, "--store", str(tmp_path / "s.sqlite")])
        assert result.exit_code == 2 and f"{pe} is not an encoding: {why}" in result.output, result.output
        assert "unknown encoding" not in result.output
    assert not (tmp_path / "s.sqlite").exists()
