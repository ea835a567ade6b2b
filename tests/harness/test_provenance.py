"""What a result records about the code and the machine that produced it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from harness.records.provenance import commit_of, cpu_name, machine_name, provenance

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path):
    """A git checkout with one committed module and an ignored folder."""
    _git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("venv/\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    return tmp_path, sha


@needs_git
def test_a_clean_checkout_records_its_commit(checkout):
    root, sha = checkout
    (root / "notes.txt").write_text("not code\n")  # an untracked file that no import reaches
    (root / "venv").mkdir()
    (root / "venv" / "site.py").write_text("ignored\n")  # ignored: not the checkout's code
    assert commit_of(root) == sha


@needs_git
@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda root: (root / "pkg" / "mod.py").write_text("x = 2\n"), id="tracked file changed"),
        # before, untracked files were left out: a module beside the package's, or one at the
        # root shadowing a library (`random.py`) ran under a record naming the clean commit
        pytest.param(lambda root: (root / "pkg" / "extra.py").write_text("y = 1\n"), id="untracked module"),
        pytest.param(lambda root: (root / "random.py").write_text("z = 1\n"), id="untracked module at the root"),
    ],
)
def test_code_the_commit_does_not_hold_marks_it_dirty(checkout, change):
    root, sha = checkout
    change(root)
    assert commit_of(root) == f"{sha}-dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path):
    assert commit_of(tmp_path / "missing") == "unknown"


def test_the_cpu_and_its_kernels_are_recorded():
    # the device string says cpu:x86_64 on every x86 machine; the CPU model and the
    # instruction set torch dispatches to tell two of them apart
    name = cpu_name()
    assert name.endswith(f"(torch CPU kernels: {torch.backends.cpu.get_cpu_capability()})")
    assert name.split(" (torch CPU kernels")[0].strip()
    prov = provenance(torch.device("cpu"))
    assert prov["cpu"] == name and all(isinstance(v, str) for v in prov.values())
    assert machine_name(torch.device("cpu")) == f"{prov['device']} on {name}"


@pytest.mark.parametrize(
    ("pe", "expected"),
    [
        ("randomized:ape", {"max_length": 2048, "randomize_eval": True, "draw": "per_length"}),
        ("randomized:ape{max_length=336}", {"max_length": 336}),
        ("hard_alibi", {"n_masked": None}),
        ("learned_prf_sh", {"hidden": 64, "depth": 2, "n_slots": None}),
        ("abacus+fire{max_k=50}", {"max_k": 50, "mlp_width": 32}),
    ],
)
def test_a_run_records_every_option_its_encoding_was_built_with(pe, expected):
    """Records keep their meaning when a default changes later: the provenance holds the
    encoding's fully resolved options (defaults included), as the harness built it."""
    from harness.config import preset_config
    from harness.records.provenance import run_provenance

    cfg = preset_config("smoke", pe=pe, task="copy", seed=0)
    resolved = run_provenance(cfg, torch.device("cpu"))["pe_options_resolved"]
    assert expected.items() <= resolved.items()
    assert not {"d_model", "n_heads", "n_layers", "head_dim"} & set(resolved)  # the model's shape, not options


def test_resolved_options_are_what_create_builds_with():
    import pezoo

    resolved = pezoo.resolved_options("randomized:rope", max_length=64, layout="half")
    assert resolved["max_length"] == 64 and resolved["layout"] == "half" and resolved["base"] == 10000.0
    with pytest.raises(TypeError):
        pezoo.resolved_options("rope", nosuch=1)
    pe = pezoo.create("randomized:rope", dims=pezoo.ModelDims(32, 4, 1), **resolved)  # the record rebuilds it
    assert pe.max_length == 64


def test_a_copy_without_git_history_records_the_commit_it_is_told_marked_as_stated(monkeypatch):
    from harness.records import provenance as prov

    monkeypatch.setattr(prov, "commit_of", lambda root: "unknown")
    monkeypatch.delenv(prov.COMMIT_ENV, raising=False)
    assert prov.git_commit.__wrapped__() == "unknown"
    monkeypatch.setenv(prov.COMMIT_ENV, "abc123")
    assert prov.git_commit.__wrapped__() == "abc123 (stated by $PEZOO_COMMIT: this copy of the code has no git history)"
    monkeypatch.setattr(prov, "commit_of", lambda root: "def456")
    assert prov.git_commit.__wrapped__() == "def456"  # a checkout's own history wins


@pytest.fixture
def tf32_restored():
    """The process's TF32 switches as they were after the test (``use_tf32`` sets them)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(
    ("device", "accel", "overrides", "expected"),
    [
        ("cpu", None, {}, {"exact_match_by": "greedy decode", "tf32": "off", "loop": "none"}),
        ("cpu", "forced", {}, {"exact_match_by": "teacher-forced read-off", "tf32": "off", "loop": "forced"}),
        ("cpu", "prefetch,readback", {}, {"exact_match_by": "greedy decode", "loop": "prefetch,readback"}),
        # a GPU's defaults: every loop feature, exact match read off the pass, TF32 matmuls
        (
            "cuda",
            None,
            {},
            {
                "exact_match_by": "teacher-forced read-off",
                "tf32": "on",
                "loop": "prefetch,readback,fused,graphs,forced,spawn",
            },
        ),
        ("cuda", None, {"eval": {"match": "answer"}}, {"exact_match_by": "greedy decode"}),  # only a decode scores it
        ("cuda", "off", {}, {"exact_match_by": "greedy decode", "tf32": "on", "loop": "none"}),
    ],
)
def test_a_record_says_how_exact_match_and_matmuls_were_computed(
    tf32_restored, monkeypatch, device, accel, overrides, expected
):
    """A GPU record and a CPU record of one config are made differently (exact match read off
    the teacher-forced pass, TF32 matrix products, the loop's features); the provenance says so."""
    from harness.config import preset_config
    from harness.execution.run import how_made
    from harness.training.precision import use_tf32

    if accel is None:
        monkeypatch.delenv("PEZOO_ACCEL", raising=False)
    else:
        monkeypatch.setenv("PEZOO_ACCEL", accel)
    task = "scan_cot" if overrides else "copy"
    cfg = preset_config("smoke", pe="nope", task=task, seed=0, overrides=overrides or None)
    use_tf32(torch.device(device))  # what train_and_evaluate does first
    made = how_made(cfg, torch.device(device))
    assert expected.items() <= made.items()


def test_a_finished_run_carries_how_it_was_made(tmp_path, monkeypatch):
    from harness.config import preset_config
    from harness.execution.run import checkpoint_path, train_and_evaluate

    monkeypatch.delenv("PEZOO_ACCEL", raising=False)
    cfg = preset_config(
        "smoke", pe="nope", task="copy", seed=0, overrides={"train": {"steps": 2}, "eval": {"samples": 2}}
    )
    result = train_and_evaluate(
        cfg, torch.device("cpu"), checkpoint_path(tmp_path, cfg.run_id()), notice=lambda m: None
    )
    assert result.provenance["exact_match_by"] == "greedy decode"
    assert (result.provenance["tf32"], result.provenance["loop"]) == ("off", "none")


def test_a_record_says_which_attention_backend_ran_when_its_encoding_cannot_run_the_configured_one(tmp_path):
    """Stick-breaking's normaliser runs on eager only: a run configured with sdpa runs it on eager,
    and its record says so (the config keeps the backend the comparison shares)."""
    from harness.config import preset_config
    from harness.execution.run import execute
    from harness.records.store import Store

    store = Store(tmp_path / "s.db")
    for pe, ran in (("stick_breaking", "eager"), ("rope", "sdpa")):
        cfg = preset_config("smoke", pe=pe, task="copy", seed=0, overrides={"train": {"steps": 2}})
        assert cfg.backbone.backend == "sdpa"
        assert execute(cfg, store, torch.device("cpu"), notice=lambda m: None).status == "finished"
        assert store.record(cfg.run_id()).provenance["attention_backend"] == ran
