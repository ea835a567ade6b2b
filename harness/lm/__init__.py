"""The language-modelling track: byte-level models trained short on real text and code and
scored in bits per byte far past the training length (docs/lm.md).

One module per part:

    config    a run's configuration, its presets, and its identity
    corpora   the corpora: obtained by package name, never committed
    overlap   the chunk-overlap scan: which 64-byte runs of one text occur in another
    split     training and held-out documents, near-duplicates kept on one side
    tasks     the tasks: a corpus, read as bytes
    data      training windows and held-out regions of a corpus, as byte tensors
    claims    which runs the papers' LM claims name (the sweep gives them five seeds)
    evaluate  bits per byte at every test length, in two modes, as sums and counts
    passkey   passkey retrieval: a key hidden at a depth in held-out text, right of total per cell
    positions bits per byte by position within the window, as nats sums and byte counts per bucket
    hf        your own model: a Hugging Face causal LM with a pezoo encoding, scored alike
    record    a run's result (``LmRecord``), its JSON form, and its folder store (``LmStore``)
    run       train and evaluate one run; a sweep of them into an ``LmStore``
    sweep     LM sweep files (``leaderboard/lm/sweep.toml``) read into configs
"""
