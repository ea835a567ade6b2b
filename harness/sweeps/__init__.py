"""Sweeps: many runs, planned, timed, announced, followed and spread over executors.

One module per part:

    sweep      sweep specifications (from the command line or a TOML file)
    labels     what tells the runs of a sweep apart: the axes that vary, each run's label
    plan       which runs of a sweep a store has done, and how long the missing ones take
    estimate   how long a run will take on this device, from the first source that knows
    speeds     recorded speeds of each preset per kind of device
    deadline   a sweep's time limit: start only the runs expected to end before it
    announce   what ``pezoo bench`` says before it trains anything
    progress   progress of a sweep and of its runs, for ``pezoo bench``
    executors  (package) where the runs train: in process, a local pool, or Ray

This ``__init__`` imports nothing: import the module you need.
"""
