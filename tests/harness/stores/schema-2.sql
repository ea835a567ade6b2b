BEGIN TRANSACTION;
CREATE TABLE diagnostics (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    body   TEXT NOT NULL  -- JSON: what the encoding did on one example (harness.diagnostics)
);
INSERT INTO "diagnostics" VALUES('2da2d3b03c40c983','{"layers": [{"key_confidence": [[[1.0, 0.25]]], "key_modes": [[[0, -1]]], "layer": 0, "query_confidence": [[[0.5, 1.0]]], "query_modes": [[[0, 1]]], "support": 4}], "scale": 8, "tokens": ["1", "2"], "train_max": 5, "version": 1}');
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('schema_version','2');
CREATE TABLE metrics (
    run_id         TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    split          TEXT NOT NULL,  -- train | test
    length         INTEGER NOT NULL,
    token_length   REAL NOT NULL,
    n              INTEGER NOT NULL,
    exact_match    REAL NOT NULL,
    token_accuracy REAL NOT NULL,
    PRIMARY KEY (run_id, length)
);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','train',1,5.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','train',2,7.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','train',3,9.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','train',4,11.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','train',5,13.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','test',6,15.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','test',7,17.0,8,0.5,0.75);
INSERT INTO "metrics" VALUES('2da2d3b03c40c983','test',8,19.0,8,0.5,0.75);
CREATE TABLE runs (
    run_id        TEXT PRIMARY KEY,
    pe            TEXT NOT NULL,
    task          TEXT NOT NULL,
    seed          INTEGER NOT NULL,
    preset        TEXT NOT NULL,
    config        TEXT NOT NULL,
    status        TEXT NOT NULL,   -- running | finished | diverged | failed | interrupted
    error         TEXT,
    provenance    TEXT NOT NULL,   -- JSON: commit, device, torch/pezoo/python versions, host
    n_params      INTEGER,
    pe_params     INTEGER,
    final_loss    REAL,
    train_seconds REAL,
    eval_seconds  REAL,
    started_at    REAL NOT NULL,
    finished_at   REAL,
    owner         TEXT,            -- JSON (Owner) of the process holding a running run, else NULL
    heartbeat     REAL             -- when that process last said it is alive (Unix time)
);
INSERT INTO "runs" VALUES('2da2d3b03c40c983','rope','copy',0,'smoke','{"backbone": {"backend": "sdpa", "causal": true, "d_ff": null, "d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 64}, "eval": {"batch_size": 100, "every": 0, "match": "trace", "precision": null, "samples": 8, "select": "final", "start_below_loss": null, "test_max": 8, "test_stride": 1, "window": 0, "window_jump": 20}, "pe": "rope", "pe_options": {}, "preset": "smoke", "protocol": "decoder", "seed": 0, "task": "copy", "train": {"batch_size": 16, "betas": [0.9, 0.98], "curriculum": [], "grad_clip": 1.0, "lr": 0.001, "min_lr_ratio": 0.1, "optimizer": "adamw", "pack": 0, "pack_loss": "all", "precision": "fp32", "schedule": "cosine", "steps": 20, "train_max": 5, "train_min": 1, "warmup": 5, "weight_decay": 0.01}}','finished',NULL,'{"commit": "0123abc", "device": "cpu", "pezoo": "0.1", "python": "3.12", "torch": "2.x"}',1000,10,0.125,3.5,1.25,1700000000.0,1.79565662861775112149e+09,NULL,NULL);
INSERT INTO "runs" VALUES('8b67819d207778ae','alibi','copy',1,'smoke','{"backbone": {"backend": "sdpa", "causal": true, "d_ff": null, "d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 64}, "eval": {"batch_size": 100, "every": 0, "match": "trace", "precision": null, "samples": 8, "select": "final", "start_below_loss": null, "test_max": 8, "test_stride": 1, "window": 0, "window_jump": 20}, "pe": "alibi", "pe_options": {}, "preset": "smoke", "protocol": "decoder", "seed": 1, "task": "copy", "train": {"batch_size": 16, "betas": [0.9, 0.98], "curriculum": [], "grad_clip": 1.0, "lr": 0.001, "min_lr_ratio": 0.1, "optimizer": "adamw", "pack": 0, "pack_loss": "all", "precision": "fp32", "schedule": "cosine", "steps": 20, "train_max": 5, "train_min": 1, "warmup": 5, "weight_decay": 0.01}}','running',NULL,'{"commit": "0123abc", "device": "cpu", "pezoo": "0.1", "python": "3.12", "torch": "2.x"}',NULL,NULL,NULL,NULL,NULL,1700000100.0,NULL,'{"boot": "2baaa9d4-b8cd-46f6-8105-a083e0b1e22b", "host": "vm", "pid": 26850, "pidns": "pid:[4026531836]", "start": 1174419}',1.7956566286352374554e+09);
INSERT INTO "runs" VALUES('5791fd991cd1d7ff','nope','copy',2,'smoke','{"backbone": {"backend": "sdpa", "causal": true, "d_ff": null, "d_model": 32, "n_heads": 2, "n_layers": 1, "vocab_size": 64}, "eval": {"batch_size": 100, "every": 0, "match": "trace", "precision": null, "samples": 8, "select": "final", "start_below_loss": null, "test_max": 8, "test_stride": 1, "window": 0, "window_jump": 20}, "pe": "nope", "pe_options": {}, "preset": "smoke", "protocol": "decoder", "seed": 2, "task": "copy", "train": {"batch_size": 16, "betas": [0.9, 0.98], "curriculum": [], "grad_clip": 1.0, "lr": 0.001, "min_lr_ratio": 0.1, "optimizer": "adamw", "pack": 0, "pack_loss": "all", "precision": "fp32", "schedule": "cosine", "steps": 20, "train_max": 5, "train_min": 1, "warmup": 5, "weight_decay": 0.01}}','failed','RuntimeError: boom','{"commit": "0123abc", "device": "cpu", "pezoo": "0.1", "python": "3.12", "torch": "2.x"}',NULL,NULL,NULL,NULL,NULL,1700000200.0,1.79565662865120220185e+09,NULL,NULL);
COMMIT;
