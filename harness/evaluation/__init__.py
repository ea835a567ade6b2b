"""Evaluation of a trained backbone at every length, far past training.

One module:

    evaluate  greedy decoding with a KV cache, exact match and per-token accuracy, as counts

This ``__init__`` imports nothing: import the module you need.
"""
