"""NaN losses, concurrent writers, and determinism of the results store."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from click.testing import CliRunner

from harness.cli import main
from harness.results import load
from harness.store import Store


def test_nan_loss_ends_the_run_as_diverged_and_the_others_finish(tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["bench", "--pe", "nope,rope", "--task", "copy", "--preset", "smoke", "--device", "cpu"]
    # an absurd learning rate blows the weights up: the loss becomes NaN/inf within a few steps
    result = CliRunner().invoke(main, [*args, "--lr", "1e30", "--steps", "8", "--store", str(store)])
    assert result.exit_code == 1
    assert "diverged" in result.output and "loss became" in result.output
    with Store(store) as s:
        statuses = {r["pe"]: (r["status"], r["error"]) for r in s.runs()}
    assert {st for st, _ in statuses.values()} == {"diverged"}
    assert all("loss became" in err for _, err in statuses.values())
    # a sane run in the same store still finishes
    ok = CliRunner().invoke(main, [*args[:2], "nope", *args[3:], "--store", str(store)])
    assert ok.exit_code == 0, ok.output
    assert set(load(store)["pe"]) == {"nope"}


WRITER = textwrap.dedent(
    """
    import sys
    from harness.config import preset_config
    from harness.evaluate import LengthMetrics
    from harness.store import Store

    path, worker = sys.argv[1], int(sys.argv[2])
    with Store(path) as store:
        for seed in range(25):
            cfg = preset_config("smoke", pe="rope", task="copy", seed=1000 * worker + seed)
            run_id = store.start(cfg, {"commit": "test"})
            metrics = [("test", LengthMetrics(n, float(n), 4, 0.5, 0.5)) for n in range(1, 9)]
            store.finish(run_id, metrics, final_loss=0.1, train_seconds=1.0, eval_seconds=1.0,
                         n_params={"total": 1, "pe": 0})
    """
)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    store = tmp_path / "s.sqlite"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    procs = [subprocess.Popen([sys.executable, str(script), str(store), str(w)]) for w in (1, 2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with Store(store) as s:
        runs = s.runs()
        assert len(runs) == 50 and {r["status"] for r in runs} == {"finished"}
        assert all(len(s.metrics(r["run_id"])) == 8 for r in runs)
