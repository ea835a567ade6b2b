"""The language-modelling track: byte-level models trained short on real text and code and
scored in bits per byte far past the training length (docs/lm.md).

The track's tasks and data are on the tasks floor (``harness.tasks.lm``: corpora, the
split, windows and regions, passkey samples), what a run measures on the records floor
(``harness.records.lm_metrics``, ``harness.records.lm_positions``), how it is scored on the
evaluation floor (``harness.evaluation.lm``). One module per part here:

    config    a run's configuration, its presets, and its identity
    claims    which runs the papers' LM claims name (the sweep gives them five seeds)
    hf        your own model: a Hugging Face causal LM with a pezoo encoding, scored alike
    record    a run's result (``LmRecord``), its JSON form, and its folder store (``LmStore``)
    run       train and evaluate one run; a sweep of them into an ``LmStore``
    sweep     LM sweep files (``leaderboard/lm/sweep.toml``) read into configs
"""
