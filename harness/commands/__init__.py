"""The ``pezoo`` subcommands, one module each: ``bench``, ``list``, ``results`` and the
``sweep`` group (``pezoo perf`` is ``harness.perf.command``). ``harness.cli`` gathers them
into the ``pezoo`` group, with the commands upper floors add through entry points."""
