"""The language-modelling track: byte-level models trained short on real text and code and
scored in bits per byte far past the training length (docs/lm.md). Its runs are the
harness's (``pezoo bench --task lm_en --preset lm``: the one loop, store and record); what
is the track's own is here.

The track's tasks and data are on the tasks floor (``harness.tasks.lm``: corpora, the
split, windows and regions, passkey samples), what a run measures on the records floor
(``harness.records.lm_metrics``, ``harness.records.lm_positions``), how it is scored on the
evaluation floor (``harness.evaluation.lm``). One module per part here:

    config    the config of the page's view (``LmConfig``, from a run's ``RunConfig``) and of published records
    claims    which runs the papers' LM claims name (the sweep gives them five seeds)
    hf        your own model: a Hugging Face causal LM with a pezoo encoding, scored alike
    record    the LM page's view of a run (``LmRecord``), and the records published before the one harness
"""
