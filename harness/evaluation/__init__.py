"""Evaluation of a trained backbone at every length, far past training.

One module per track:

    evaluate  greedy decoding with a KV cache, exact match and per-token accuracy, as counts
    lm        bits per byte at every test length in two modes, and the passkey grid, as counts

This ``__init__`` imports nothing: import the module you need.
"""
