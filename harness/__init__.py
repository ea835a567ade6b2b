"""harness: trains identical backbones per (encoding, task, seed), evaluates far past the
training length, and stores the results. Depends on pezoo only through its public API.

The rooms, one subpackage per role (each ``__init__`` maps its own modules):

    cli         the ``pezoo`` command line (``python -m harness.cli``, the console script)
    config      what a run is: its typed configuration, presets, size bounds, encoding specs,
                the papers' protocols, and the one number checker
    tasks       the task suite, one module per task, and batches of its instances as tensors
    training    training one backbone: the model, the loop, its batches, precision, CUDA
                graphs, checkpoints, diagnostics, TensorBoard logs and speed probes
    evaluation  greedy decoding far past the training length: exact match, token accuracy
    records     what a run leaves: its record and result, exact counts, provenance, the
                ranking rule, the SQLite store, kept results, and the files pezoo reads and writes
    execution   one run from start to end: checks before training, attempts, train, evaluate
                and record, kept final weights
    sweeps      many runs: sweep specs and plans, labels, time limits, estimates and recorded
                speeds, progress, what ``pezoo bench`` announces, and the executors
    commands    the ``pezoo`` subcommands and what they share: options, the catalogue, the
                terminal leaderboard, text safe to print
    lm          the language-modelling track (bits per byte on real text and code)
    perf        performance of the zoo: time and memory per encoding (``pezoo perf``)

The rooms are floors, lowest first; each imports only itself and the floors below it,
lazy imports and ``TYPE_CHECKING`` ones included (tests/harness/test_floors.py):

    tasks -> config -> records -> training -> evaluation -> execution -> lm -> perf -> sweeps -> commands -> cli

A shared type lives on the lowest floor that needs it: the backbone's shape and the
precisions' names are configuration (``config.backbone``, ``config.precisions``), an
evaluation's metrics are what a record holds (``records.metrics``). Only the command
line's top (cli, commands) reaches the leaderboard, through entry points.

One front door runs one config: ``harness.execution.run.execute(cfg, store, device)`` trains,
evaluates and records it in the store (or finds it there) and returns its outcome;
``train_and_evaluate(cfg, device, checkpoint)`` does the same without a store and returns
the result. A sweep's workers (in process, in a group, in worker processes, on Ray) call
``train_and_evaluate`` and its driver records what they return; ``pezoo bench`` is a sweep.
"""
