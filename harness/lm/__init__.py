"""The language-modelling track: byte-level models trained short on real text and code and
scored in bits per byte far past the training length (docs/lm.md).

The track's tasks and data are on the tasks floor (``harness.tasks.lm``: corpora, the
split, windows and regions), its curves by position on the records floor
(``harness.records.lm_positions``). One module per part here:

    config    a run's configuration, its presets, and its identity
    claims    which runs the papers' LM claims name (the sweep gives them five seeds)
    evaluate  bits per byte at every test length, in two modes, as sums and counts
    passkey   passkey retrieval: a key hidden at a depth in held-out text, right of total per cell
    hf        your own model: a Hugging Face causal LM with a pezoo encoding, scored alike
    record    a run's result (``LmRecord``), its JSON form, and its folder store (``LmStore``)
    run       train and evaluate one run; a sweep of them into an ``LmStore``
    sweep     LM sweep files (``leaderboard/lm/sweep.toml``) read into configs
"""
