"""What runs leave behind, and the files pezoo reads and writes.

One module per part:

    record        a finished run's result: one typed record (``RunRecord``) and its validator
    record_fields the validator's checks of a record's fields: provenance, params, timings, metrics
    identity      a run's identity and the scales it evaluates, on a record's plain dict
    result        what one run ends as (``RunOutcome``) and hands back (``RunResult``)
    counts        exact numbers: every metric a count over a total, one rounding rule
    metrics       what an evaluation measures, as counts: one scale's (``LengthMetrics``), a whole one's
    lm_metrics    what a language-modelling run measures, as counts: nats and bytes, passkey cells
    lm_positions  bits per byte by position within a window, as nats sums and byte counts per bucket
    recount       counts recovered from a metric stored as a float (records before counts)
    provenance    where a result came from: commit, device, library versions, plugins
    ranking       the ranking rule of the terminal table and the published board
    frames        results as pandas DataFrames, read from the store
    inputs        reading the files pezoo takes from people (results, sweeps, retired.toml,
                  a site's manifest), refusing links, oversized and deeply nested files
    files         writing pezoo's own files atomically (checkpoints, kept results)
    kept_results  finished results the store could not take, kept as JSON until it can
    store         (package) the results store: one local SQLite file

This ``__init__`` imports nothing: import the module you need.
"""
