"""benchmarks/lm_gpu_sweep.py, the LM sweep's GPU call: the device's stores start from the home
records, what comes back is only what the device trained (rope's weights first), and merging
it at home adds each run once."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import tarfile
from pathlib import Path

import pytest

from harness.lm.config import lm_preset_config
from harness.lm.record import LmRecord, LmStore
from harness.records.lm_metrics import LengthScore

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "lm_gpu_sweep.py"


def _module(work: Path):
    spec = importlib.util.spec_from_file_location("lm_gpu_sweep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.WORK = work
    return module


def _record(pe: str, seed: int, task: str = "lm_en") -> LmRecord:
    evals = {"passkey": 0, "positions": False}  # no grid, no curves by position
    cfg = lm_preset_config("lm_smoke", pe=pe, task=task, seed=seed, overrides={"eval": evals})
    scores = tuple(LengthScore("windows", s, 2.0 * 100 * math.log(2), 100) for s in cfg.eval.lengths)
    scores += tuple(LengthScore("tail", s, 2.0 * 32 * math.log(2), 32) for s in cfg.eval.tail_lengths())
    return LmRecord(cfg, scores, 1.0, 10, 1.0, 1.0, {"total": 1}, {"corpus_sha256": "ab" * 32})


def test_home_records_seed_the_device_stores_and_only_new_runs_come_back_and_merge_once(tmp_path):
    mod = _module(tmp_path / "work")
    home_store = LmStore(tmp_path / "stores" / "lm_en")
    home_store.add(_record("alibi", 0))
    home = tmp_path / "home"
    home.mkdir()
    (home / "lm_en.runs.jsonl").write_text(home_store.path.read_text())
    assert mod.seed_stores(home) == 1
    device = LmStore(tmp_path / "work" / "lm_en")
    assert device.finished() == home_store.finished()  # a sweep there skips what home trained
    for pe in ("nope", "rope"):  # what the device trains
        record = _record(pe, 0)
        device.add(record)
        path = device.weights(record.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pe.encode() * 10)
    out = tmp_path / "out"
    out.mkdir()
    known = {json.loads(line)["run_id"] for line in (home / "lm_en.runs.jsonl").read_text().splitlines()}
    summary: dict = {}
    mod.pack(out, summary, known)
    brought = [json.loads(line)["config"]["pe"] for line in (out / "lm_en.runs.jsonl").read_text().splitlines()]
    assert brought == ["nope", "rope"] and not (out / "lm_code.runs.jsonl").exists()
    with tarfile.open(out / "weights0.tar") as tar:
        names = tar.getnames()
    assert names[0] == f"lm_en/{_record('rope', 0).run_id}.pt" and len(names) == 2  # rope's first
    mod.merge(out, tmp_path / "stores")
    mod.merge(out, tmp_path / "stores")  # again: nothing added twice
    ids = [r.run_id for r in home_store.records()]
    assert len(ids) == len(set(ids)) == 3
    assert home_store.weights(_record("rope", 0).run_id).read_bytes() == b"rope" * 10


def _part(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    "hostile",
    [
        (_member("../escaped.pt"), b"x"),
        (_member("lm_en/../../escaped.pt"), b"x"),
        (_member("/tmp/escaped.pt"), b"x"),
        (_member("lm_en/sub/escaped.pt"), b"x"),
        (_member("lm_en/escaped.pt", tarfile.SYMTYPE, "../../../escaped.pt"), None),
        (_member("lm_en/escaped.pt", tarfile.LNKTYPE, "../../../escaped.pt"), None),
        (_member("lm_en/escaped.pt", tarfile.CHRTYPE), None),
        (_member("other_task/escaped.pt"), b"x"),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "nested", "symlink", "hardlink", "device", "unknown-task"],
)
def test_merge_refuses_a_weights_part_with_a_member_outside_its_place(tmp_path, hostile):
    mod = _module(tmp_path / "work")
    out = tmp_path / "out"
    out.mkdir()
    record = _record("rope", 0)
    (out / "lm_en.runs.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    good = (_member(f"lm_en/{record.run_id}.pt"), b"weights")
    _part(out / "weights0.tar", [good, hostile])
    stores = tmp_path / "home" / "stores"
    stores.mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as info:
        mod.merge(out, stores)
    assert "weights0.tar" in str(info.value)
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before  # nothing written: not the escaped file, not the good one, not the record
