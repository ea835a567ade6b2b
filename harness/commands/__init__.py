"""The ``pezoo`` subcommands, one module each: ``bench``, ``list``, ``results``, ``lm`` and the
``sweep`` group (``pezoo perf`` is ``harness.perf.command``). ``harness.cli`` gathers them
into the ``pezoo`` group, with the commands upper floors add through entry points.

One module per part:

    bench      ``pezoo bench``: train and evaluate a sweep, then print its leaderboard
    list       ``pezoo list``: encodings, tasks, presets and backends
    results    ``pezoo results``: what a store holds, as tables or per-length rows
    sweep      ``pezoo sweep``: a sweep file's plan and its time estimate
    lm         ``pezoo lm``: the language-modelling track's corpora and your own model
    checks     what several commands check first, as click errors
    options    command-line options that several commands share (harness/ and leaderboard/)
    catalogue  what ``pezoo list`` shows, and what a wrong name is told
    report     the terminal leaderboard: one table per task, one row per encoding
    printable  text safe to print on a terminal: names from stores and files escaped
"""
