"""One run from start to end: checked, trained, evaluated and recorded.

One module per part:

    preflight     checks before any training: a run that cannot work fails at once, saying why
    attempt       one attempt at a run, from its first notice to its result
    run           executing runs: train, evaluate at every length, record in the store
    recording     recording a run's result in the store, or keeping it beside its checkpoint
    kept_weights  a finished run's kept final weights: where, their SHA-256, reading them back

This ``__init__`` imports nothing: import the module you need.
"""
