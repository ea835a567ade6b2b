"""Training one backbone on one task, and what comes with it.

One module per part:

    backbone     the one backbone every encoding is trained in: a decoder-only pre-LN Transformer
    train        the training loop: AdamW, warm-up + cosine decay, clipping, seeded; resuming
    accel        how the loop drives its device: the GPU features, ``PEZOO_ACCEL``
    feed         the training batches of a run, in order, inline or from a producer thread
    graphs       a step's loss replayed as CUDA graphs per length bucket (the padded pass)
    step_graph   the whole step (pass, clip, fused AdamW) replayed as one CUDA graph per bucket
    stacked      runs of one model shape taking each step's pass together, vmapped over stacked weights
    loss         the training loss of one batch, and how the loop takes it (eager or graphed)
    precision    autocast over float32 master weights, fp16 loss scaling, a GPU's defaults
    diagnostics  what a trained encoding did, kept with the run for the leaderboard
    tblog        optional TensorBoard logging of a run (``pezoo bench --tensorboard``)
    probe        speed probes: a few timed training steps, for ``pezoo sweep plan --probe``
    checkpoint   (package) checkpoints: a run's full training state and its final weights

This ``__init__`` imports nothing: import the module you need.
"""
