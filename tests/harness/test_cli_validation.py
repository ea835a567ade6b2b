"""Bad options and sweep files: a clear error before the store exists, never a traceback or a
failed run after it; unknown names in filters are errors with suggestions."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.commands.printable import printable
from harness.config import preset_config
from harness.evaluation.evaluate import LengthMetrics
from harness.records.record import RunRecord
from harness.records.store import Store

BENCH = ["bench", "--pe", "nope", "--task", "copy", "--preset", "smoke", "--device", "cpu"]


def _refused(args, tmp_path, message, code=2):
    store = tmp_path / "s.sqlite"
    result = CliRunner().invoke(main, [*args, "--store", str(store)])
    assert result.exit_code == code, result.output
    assert message in result.output, result.output
    assert not isinstance(result.exception, (TypeError, KeyError, ZeroDivisionError, OverflowError))
    assert not store.exists()  # refused before the store is created
    assert not (tmp_path / "checkpoints").exists()
    return result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--test-stride", "0"], "eval.test_stride must be an integer >= 1, got 0 (--test-stride)"),
        (["--test-stride", "-1"], "eval.test_stride must be an integer >= 1, got -1 (--test-stride)"),
        (["--eval-samples", "0"], "eval.samples must be an integer >= 1, got 0 (--eval-samples)"),
        (["--eval-samples", "-3"], "eval.samples must be an integer >= 1, got -3"),
        (["--lr", "0"], "train.lr must be > 0, got 0.0 (--lr)"),
        (["--lr", "-1e-3"], "train.lr must be > 0"),
        (["--lr", "nan"], "train.lr must be a finite number, got nan (--lr)"),
        (["--lr", "inf"], "train.lr must be a finite number, got inf"),
        (["--lr", "1e-3,-inf"], "train.lr must be a finite number, got -inf"),
        (["--checkpoint-every", "0"], "'--checkpoint-every': 0 is not in the range x>=1"),
        (["--checkpoint-every", "-1"], "'--checkpoint-every': -1 is not in the range x>=1"),
        (["--eval-start-loss", "nan"], "eval.start_below_loss must be a finite number, got nan (--eval-start-loss)"),
        (["--eval-start-loss", "0", "--eval-every", "2"], "eval.start_below_loss must be > 0"),
        (["--seed", str(2**63)], "'--seed': 9223372036854775808 is not in the range 0<=x<=9223372036854775807"),
        (["--seed", "-1"], "'--seed': -1 is not in the range 0<=x"),
        (["--seed", str(2**63 - 1), "--seeds", "2"], "seed must be at most 9223372036854775807"),
        (["--seeds", "0"], "'--seeds': 0 is not in the range x>=1"),
        (["--seeds", "1000000"], "the sweep holds 1,000,000 runs, more than the limit of 100,000"),
        (["--seeds", "5", "--max-runs", "4"], "the sweep holds 5 runs, more than the limit of 4"),
        (["--steps", str(2**64)], "train.steps must be at most"),
        (["--backend", "xformers"], "the xformers backend runs on CUDA tensors only, and no CUDA device is in use"),
        # accepted and ignored before: a second run id for the same training, or local runs for a cluster's
        (["--eval-start-loss", "0.1"], "this run evaluates only its final model (eval.every is 0): set eval.every > 0"),
        (["--eval-start-loss", "0.1"], "(--eval-every, --eval-start-loss)"),
        (["--ray-address", "10.0.0.1:6379"], "--ray-address names a Ray cluster for --executor ray"),
        (["--window", "5"], "eval.window must be larger than eval.window_jump, the 20 oldest tokens a full window"),
        (["--window", "5"], "got 5 (--window)"),
        # round four: "unknown eval config key(s) finetune_steps", an internal name, not the flag
        (["--finetune-steps", "5"], "(--finetune-steps) fine-tune a language-modelling run's inference-time variant"),
        (["--finetune-length", "64"], "task 'copy' is an algorithmic task"),
    ],
)
def test_bench_refuses_bad_values_before_the_store_exists(tmp_path, args, message):
    _refused([*BENCH, *args], tmp_path, message)


def test_bench_refuses_a_hybrid_whose_global_heads_are_not_the_backbones_width(tmp_path):
    """The backbone's heads are all d_model / n_heads wide (quick: 128 / 4 = 32): a hybrid
    whose G layers want 64-wide heads failed at its first training step, its run begun."""
    bench = ["bench", "--task", "copy", "--preset", "quick", "--device", "cpu"]
    _refused([*bench, "--pe", "hybrid{pattern=RRG,global_head_dim=64}"], tmp_path, "layer 2 q/k heads 64 wide, where")
    _refused([*bench, "--pe", "ssmax:hybrid{pattern=RRG,global_head_dim=64}"], tmp_path, "d_model / n_heads = 32")


def _sweep(tmp_path, content: str | bytes):
    path = tmp_path / "sweep.toml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('pe = "nope"\ntask = "copy"\nlr = nan\n', "lr must be a finite number, got nan"),
        ('pe = "nope"\ntask = "copy"\nlr = [1e-3, inf]\n', "lr must be a finite number, got inf"),
        ('pe = "nope"\ntask = "copy"\nsteps = 99999999999999999999999\n', "steps must be at most 9223372036854775807"),
        ('pe = "nope"\ntask = "copy"\nseed = 99999999999999999999999\n', "seed (the first seed) must be at most"),
        ('pe = "nope"\ntask = "copy"\nseeds = [99999999999999999999999]\n', "seeds must be at most"),
        ('pe = "nope"\ntask = "copy"\nseeds = 1000000000000\n', "seeds = 1,000,000,000,000: the sweep holds"),
        ('pe = "nope"\ntask = "copy"\ntest_stride = 0\n', "eval.test_stride must be an integer >= 1, got 0"),
        ('pe = "nope"\ntask = "copy"\ntest_len = 30000000\n', "eval.test_max must be at most"),
        ('pe = "nope"\ntask = "copy"\neval_samples = 100000000\n', "eval.samples must be at most"),
        ('pe = ["randomized:ape{max_length=99999999999}"]\ntask = "copy"\n', "max_length must be at most"),
        # round four: a quoted boolean read as true; an option used only by the optimiser failed
        # every attempt after the store was made; a count as a float reached torch.randint
        ('pe = [{name = "randomized:rope", randomize_eval = "false"}]\ntask = "copy"\n', "randomize_eval must be"),
        ('pe = [\'fire{share_layers="false"}\']\ntask = "copy"\n', "got the string 'false'"),
        ('pe = [\'prism{alpha_lr="abc"}\']\ntask = "copy"\n', "prism: alpha_lr must be a number"),
        ('pe = ["abacus{max_k=1.5}"]\ntask = "addition"\n', "abacus: max_k must be an integer, got 1.5"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "is not UTF-8 text"),
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
        # names and values the file got wrong name the file too (they did not)
        ('pe = "nope"\ntask = ["revrse"]\n', "unknown task 'revrse'"),
        ('pe = ["rope{bse=5}"]\ntask = "copy"\n', "bse"),
        ('pe = "nope"\ntask = "copy"\ntest_len = 5\n', "must exceed"),
        # 2 x 2 x 30 x 2000 = 240,000 runs: refused by count, before any is built
        (
            'pe = ["nope", "rope"]\ntask = ["copy", "reverse"]\nseeds = 2000\n'
            "lr = [" + ", ".join(f"{i}e-4" for i in range(1, 31)) + "]\n",
            "the sweep holds 240,000 runs, more than the limit of 100,000; split it, or raise the limit",
        ),
    ],
)
def test_bad_sweep_files_are_refused_naming_the_file(tmp_path, content, message):
    path = _sweep(tmp_path, content)
    output = _refused(["bench", "--sweep", str(path), "--device", "cpu"], tmp_path, message)
    assert str(path) in output
    plan = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", str(tmp_path / "s.sqlite")])
    assert plan.exit_code == 2 and message in plan.output
    assert not (tmp_path / "s.sqlite").exists()


def test_max_runs_raises_the_limit(tmp_path):
    path = _sweep(tmp_path, 'preset = "smoke"\npe = ["nope", "rope"]\ntask = "copy"\nseeds = 3\n')
    store = str(tmp_path / "s.sqlite")
    refused = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", store, "--max-runs", "5"])
    assert refused.exit_code == 2 and "the sweep holds 6 runs, more than the limit of 5" in refused.output
    allowed = CliRunner().invoke(main, ["sweep", "plan", str(path), "--store", store, "--max-runs", "6"])
    assert allowed.exit_code == 0, allowed.output


def test_perf_refuses_an_unknown_preset():
    result = CliRunner().invoke(main, ["perf", "--presets", "quick,quik"])
    assert result.exit_code == 2
    assert "unknown preset 'quik'. Did you mean 'quick'?" in result.output


# --------------------------------------------------------------------------------------
# `pezoo results` filters
# --------------------------------------------------------------------------------------


@pytest.fixture
def store_with_a_plugin_run(tmp_path):
    """A store holding one finished run of an encoding this checkout does not have (imported
    from published results of a plugin) and one of rope."""
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        for pe in ("my_plugin_pe", "rope"):
            assert store.insert_finished(finished(preset_config("smoke", pe=pe, task="copy", seed=0)))
    return path


def finished(cfg) -> RunRecord:
    """A finished run of ``cfg`` as a store imports it (one test scale)."""
    metrics = (("test", LengthMetrics(6, 9.0, 8, 4, 8, 6)),)
    return RunRecord(cfg.run_id(), cfg.to_dict(), {"device": "cpu"}, metrics, final_loss=0.1, train_seconds=1.0,
                     eval_seconds=1.0, started_at=0.0, finished_at=1.0, n_params=10, pe_params=0)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pe", "rop"], "unknown encoding 'rop'. Did you mean 'rope'"),
        (["--pe", "rope,alibbi"], "unknown encoding 'alibbi'. Did you mean 'alibi'"),
        (["--task", "nosuch"], "unknown task 'nosuch'"),
        (["--task", "cpy"], "Did you mean 'copy'"),
        (["--pe", "my_plugin"], "Did you mean 'my_plugin_pe'"),
    ],
)
def test_results_filters_refuse_unknown_names(store_with_a_plugin_run, args, message):
    result = CliRunner().invoke(main, ["results", "--store", str(store_with_a_plugin_run), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_results_filters_accept_registered_names_and_names_in_the_store(store_with_a_plugin_run):
    args = ["results", "--store", str(store_with_a_plugin_run), "--format", "csv"]
    plugin = CliRunner().invoke(main, [*args, "--pe", "my_plugin_pe"])
    assert plugin.exit_code == 0 and "my_plugin_pe" in plugin.output and ",rope," not in plugin.output
    absent = CliRunner().invoke(main, [*args, "--pe", "alibi"])  # registered, no runs: an empty table
    assert absent.exit_code == 0 and absent.stdout.count("\n") == 1  # the csv header
    assert "no finished runs match" in absent.stderr  # and a word on stderr


@pytest.mark.parametrize("option", ["--pe", "--task"])
def test_a_results_filter_that_names_nothing_is_no_filter_however_spelt(store_with_a_plugin_run, option):
    """``--pe ''`` listed every run and ``--pe ,`` none ("no finished runs match"): both name
    no encoding, as bench reads them (there: not given)."""
    args = ["results", "--store", str(store_with_a_plugin_run), "--format", "csv"]
    everything = CliRunner().invoke(main, args).stdout
    for value in ("", ",", " , "):
        result = CliRunner().invoke(main, [*args, option, value])
        assert result.exit_code == 0 and result.stdout == everything, (value, result.output)


def test_results_filters_take_a_spec_with_options_of_an_installed_encoding(tmp_path):
    """``--pe 'rope{layout=half}'`` names runs of an installed encoding with options: its
    runs (matched in the store's spelling, options sorted, spaces dropped), or none, but
    never "unknown encoding" (it was refused unless the store held such a run); a typo in
    the name of a spec is still one."""
    path = tmp_path / "store.sqlite"
    with Store(path) as store:
        for pe in ("rope", "fire{mlp_width=16,init_c=0.5}"):
            assert store.insert_finished(finished(preset_config("smoke", pe=pe, task="copy", seed=0)))
    args = ["results", "--store", str(path), "--format", "csv"]
    absent = CliRunner().invoke(main, [*args, "--pe", "rope{layout=half}"])
    assert absent.exit_code == 0 and "no finished runs match" in absent.stderr, absent.output
    spaced = CliRunner().invoke(main, [*args, "--pe", "fire{ mlp_width=16, init_c=0.5 }"])
    assert spaced.exit_code == 0 and spaced.stdout.count("\n") > 1 and ",rope," not in spaced.stdout
    typo = CliRunner().invoke(main, [*args, "--pe", "ropee{layout=half}"])
    assert typo.exit_code == 2 and "unknown encoding 'ropee{layout=half}'" in typo.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # copy at scale 8 (smoke's largest test scale) is 19 tokens: a 16-row table has no position for them
        (["--pe", "learned_ape{max_position=16}"], "learned_ape has positions 0..15 only"),
        (["--pe", "learned_ape{max_position=16}"], "copy at scale 8: sequences of up to 19 tokens"),
        (["--pe", "randomized{max_length=12}"], "randomized has positions 0..11 only"),
        (["--pe", "learned_ape", "--test-len", "1100"], "copy at scale 1100: sequences of up to 2203 tokens"),
    ],
)
def test_a_sequence_longer_than_the_encoding_has_positions_is_refused_before_training(tmp_path, args, message):
    """It surfaced at evaluation, after all of training, and was retried twice more."""
    _refused([*BENCH, *args], tmp_path, message)


def test_sweep_plan_refuses_what_bench_refuses(tmp_path):
    """plan listed a ruoss-preset copy run as missing (exit 0) that bench then refused."""
    sweep = _sweep(tmp_path, 'preset = "ruoss"\ntask = ["copy"]\npe = ["nope"]\n')
    result = CliRunner().invoke(main, ["sweep", "plan", str(sweep), "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2, result.output
    assert "has no fixed output length, which the encoder protocol" in result.output
    assert str(sweep) in result.output


def test_sweep_plan_refuses_an_unknown_backend_as_bench_does_naming_the_file(tmp_path):
    """plan listed and estimated runs on backend "sdpaa" (exit 0) that bench then refused, and
    bench's refusal did not say the name came from the file."""
    sweep = _sweep(tmp_path, 'preset = "smoke"\ntask = "copy"\npe = "nope"\nbackend = ["sdpa", "sdpaa"]\n')
    for args in (["sweep", "plan", str(sweep)], ["bench", "--sweep", str(sweep), "--device", "cpu"]):
        output = _refused(args, tmp_path, "unknown attention backend 'sdpaa'. Did you mean 'sdpa'?")
        assert f"Invalid value for {sweep}" in output
    output = _refused(["bench", "--sweep", str(sweep), "--backend", "eagr"], tmp_path, "Did you mean 'eager'?")
    assert "Invalid value for --backend" in output  # the command line's value replaced the file's


def test_every_encoding_of_a_sweep_is_checked_not_only_the_first_per_task(tmp_path):
    """bench checked one run per (task, preset): a learned table too short for the test
    lengths, listed after an encoding without positions, trained to the end first."""
    sweep = _sweep(tmp_path, 'preset = "smoke"\ntask = "copy"\npe = ["nope", "learned_ape{max_position=16}"]\n')
    _refused(["bench", "--sweep", str(sweep), "--device", "cpu"], tmp_path, "learned_ape has positions 0..15 only")


def test_seed_and_seeds_next_to_a_sweep_replace_only_their_own_part(tmp_path):
    """`--seed 3` alone collapsed every grid to the one seed 3, and `--seeds 1` alone reset
    a grid's `seed = 7` to 0: given one, the other took its command-line default."""
    from harness.sweeps.sweep import load_sweep

    path = _sweep(
        tmp_path,
        'preset = "smoke"\npe = ["nope"]\n[[grid]]\ntask = "copy"\nseeds = [0, 4]\n'
        '[[grid]]\ntask = "reverse"\nseeds = 2\nseed = 7\n',
    )
    spec = load_sweep(path)

    def seeds(s):
        return sorted((c.task, c.seed) for c in s.configs())

    assert seeds(spec) == [("copy", 0), ("copy", 4), ("reverse", 7), ("reverse", 8)]
    assert seeds(spec.with_seeds(None, 1)) == [("copy", 0), ("reverse", 7)]  # --seeds 1
    assert seeds(spec.with_seeds(3, 2)) == [("copy", 3), ("copy", 4), ("reverse", 3), ("reverse", 4)]
    with pytest.raises(ValueError, match=r"grid 1 lists \[0, 4\]: give --seeds too"):
        spec.with_seeds(3, None)  # --seed alone on a list not in a row
    # through the command line: refused before any store exists
    _refused(["bench", "--sweep", str(path), "--seed", "3", "--device", "cpu"], tmp_path, "give --seeds too")
    result = CliRunner().invoke(
        main, ["bench", "--sweep", str(path), "--seeds", "1", "--steps", "1", "--store", str(tmp_path / "s.sqlite"),
               "--device", "cpu", "--test-len", "6", "--eval-samples", "1"],
    )  # fmt: skip
    assert "seed 0, 7" in result.output.splitlines()[0], result.output


def test_a_checkpoint_folder_that_cannot_be_made_is_refused_before_the_store(tmp_path):
    """Every run trained without checkpoints (nothing could resume), warning at every interval."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _refused([*BENCH, "--checkpoint-dir", str(blocker / "ckpt")], tmp_path, "is not a folder")


def test_a_tensorboard_folder_that_cannot_be_made_is_refused_before_the_store(tmp_path):
    """The store was made, then every run failed at its start (NotADirectoryError), retried."""
    pytest.importorskip("tensorboard")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    output = _refused([*BENCH, "--tensorboard", str(blocker / "tb")], tmp_path, f"{blocker} is not a folder")
    assert "Invalid value for --tensorboard" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # a 1e9-element list of test lengths (MemoryError traceback); accepted, the store
        # created, then past 5.5 GB without finishing
        (["--test-len", "1000000000"], "eval.test_max must be at most"),
        (["--test-len", "30000000"], "eval.test_max must be at most"),
        (["--test-len", "30000000"], "(--test-len)"),
        (["--train-len", "20000", "--test-len", "30000"], "train.train_max must be at most"),
        (["--test-stride", "1000000000"], "eval.test_stride must be at most"),
        (["--batch-size", "1e8"], "not a comma-separated list of int values"),
        (["--batch-size", "100000000"], "train.batch_size must be at most"),
        (["--eval-samples", "1e8"], "not a comma-separated list of int values"),
        (["--eval-samples", "100000000"], "eval.samples must be at most"),
        (["--eval-samples", "100000", "--test-len", "2000"], "the evaluation sets would hold"),
        (["--steps", "100000000"], "train.steps must be at most"),
        (["--pack", "100000000"], "train.pack must be at most"),
        (["--window", "100000000"], "eval.window must be at most"),
        (["--eval-every", "100000000"], "eval.every must be at most"),
        (["--pe", "randomized:ape{max_length=99999999999}"], "max_length must be at most"),
        (["--pe", "learned_ape{max_position=99999999999}"], "max_position must be at most"),
        (["--pe", "prism{d_pe=100000000}"], "d_pe must be at most"),
    ],
)
def test_sizes_beyond_their_bounds_are_a_one_line_usage_error_before_the_store_exists(
    tmp_path, monkeypatch, args, message
):
    def no_store(*args, **kwargs):  # fail at once where the store would be made (and a run trained)
        raise AssertionError("the store was opened: the sizes were accepted")

    monkeypatch.setattr("harness.commands.bench.Store", no_store)
    output = _refused([*BENCH, *args], tmp_path, message)
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], output  # the whole reason on the one line
    assert "Traceback" not in output


HOSTILE = "rope\x1b]8;;http://x\x07\x1b[31mRED\u202eevil\x00\rback"
"""An encoding name with an OSC hyperlink, an ANSI colour, a bidi override, NUL and CR."""


@pytest.fixture
def store_with_a_hostile_name(tmp_path):
    path = tmp_path / "store.sqlite"
    cfg = replace(preset_config("smoke", pe="rope", task="copy", seed=0), pe=HOSTILE, preset="smoke\x1b[2J")
    with Store(path) as store:
        assert store.insert_finished(finished(cfg))
    return path


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_results_escape_what_a_terminal_would_act_on(store_with_a_hostile_name, fmt):
    result = CliRunner().invoke(main, ["results", "--store", str(store_with_a_hostile_name), "--format", fmt])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines and all(line.isprintable() for line in lines), [line for line in lines if not line.isprintable()]
    if fmt == "json":  # the stored name, which the json encoder escaped
        assert json.loads(lines[0])["pe"] == HOSTILE
    else:
        assert printable(HOSTILE) in result.stdout


def test_results_refuse_an_unparsable_pe_filter_with_a_usage_error(store_with_a_hostile_name):
    """A filter copied from such a name (its "]" closes no "[") raised ValueError: a traceback."""
    args = ["results", "--store", str(store_with_a_hostile_name), "--pe", printable(HOSTILE)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "unbalanced" in result.output and "--pe" in result.output, result.output


def test_a_sweep_file_saved_with_a_byte_order_mark_is_read():
    """Round four: 'not valid TOML (Invalid statement (at line 1, column 1))' for a file a Windows
    editor saved as UTF-8 with a BOM; the mark is no content."""
    from harness.records.inputs import parse_toml

    assert parse_toml('\ufeffpe = "nope"\ntask = "copy"\n') == {"pe": "nope", "task": "copy"}
    with pytest.raises(ValueError, match="not valid TOML"):
        parse_toml('pe = "nope"\n\ufefftask = "copy"\n')  # only a leading one is a mark


@pytest.mark.parametrize("variable", ["PEZOO_GROUP", "PEZOO_PRISM_SCAN"])
def test_a_bad_environment_setting_stops_bench_before_anything_is_written(tmp_path, monkeypatch, variable):
    # PEZOO_GROUP=bogus was a traceback after the store was made; PEZOO_PRISM_SCAN=bogus made the
    # store and failed the PRISM run at its first step, at every attempt
    from pezoo.encodings.prism import fused_scan

    if variable == "PEZOO_GROUP":
        monkeypatch.setenv(variable, "bogus")
    else:  # read once, when pezoo's PRISM scan is imported
        monkeypatch.setattr(fused_scan, "_backend", "bogus")
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "prism", "--task", "copy", "--preset", "smoke", "--device", "cpu", "--store", str(store)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and variable in result.output and "'bogus'" in result.output, result.output
    assert "Traceback" not in result.output and not store.exists()


def test_a_spec_with_thousands_of_unknown_options_is_refused_in_a_short_line(tmp_path):
    # --pe with 3,000 unknown options answered with 43 KB: the whole spec, then every name
    pe = "nope{" + ",".join(f"o{i}=1" for i in range(3000)) + "}"
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", pe, "--task", "copy", "--preset", "smoke", "--store", str(store)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "and 2,990 more" in result.output, result.output[-500:]
    assert len(result.output) < 1500 and not store.exists()
