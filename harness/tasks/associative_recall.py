"""associative_recall: the value bound to one queried key, read at the echoed key (H3, Zoology).

Associative recall as Fu et al., "Hungry Hungry Hippos: Towards Language Modeling with
State Space Models" (arXiv 2212.14052, §3.1, Table 1) set it, the single-query form of
which Zoology's MQAR (Arora et al. 2023, §3; the task ``mqar``) asks several at once: a
sequence binds n distinct keys to values, then names one key, and the answer is its value.
Here the prompt is the n key-value pairs, ``:`` and the queried key; the target is that
key once more, then its value (no ``.``: not a PRISM task).

walk 3 ( 7 f 3 : ( = ( 7

Scale n = the number of key-value pairs; the prompt is 2n + 2 tokens and the target 2
(2n + 6 with ``=`` and EOS, copy's length at 2n + 2). Keys and values are drawn as mqar
draws them (n distinct keys from its 43-token alphabet, so n is at most 43; digit values
with replacement); the queried key is uniform among the n.

Why the echo: in the papers' streams the value is predicted *at* the query token, the
lookup one attention step (find the key equal to the current token, read the token after
it). The harness's layout puts ``=`` between a prompt and its target, so without the echo
the value is predicted one token after the query, and the model must first fetch the query
from the previous position and then match it (a second composition on the query side).
Measured (docs/protocol-study.md, "associative recall"): a plain 2-layer transformer
learns the lookup read at the echo in 1000 steps of batch 64 and read at the query in 2000,
but read one token after the query not in 17 500. (The board's model also needs an output
layer of its own for it: the board trains this task with ``head = "untied"``.) The echo is a copy of the previous
token, a step every associative lookup also takes (the value's key is its previous token),
so it adds no ability the lookup does not already need. Exact match and per-token
accuracy score both tokens, as every decoder task's (per-token accuracy at least counts
the echo: a model that echoes but guesses the value scores about half).
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task
from harness.tasks.mqar import KEYS, QUERIES, VALUES, sample_pairs


@register_task
class AssociativeRecall(Task):
    """n key-value pairs, then one of the keys -> that key and its value."""

    name = "associative_recall"
    source = "Fu et al. 2023 (H3), §3.1: associative recall; Zoology's MQAR with one query"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 40)
    max_scale = len(KEYS)
    vocabulary = (*KEYS, *VALUES, QUERIES)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: the answer's parent, the value after the queried key, is found by content"
    )
    layout = "k₁ v₁ … kₙ vₙ : q = q v(q)"

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        keys, pairs = sample_pairs(n, rng)
        return [*pairs, QUERIES, rng.choice(keys)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        pairs, query = prompt[:-2], prompt[-1]
        bound = dict(zip(pairs[0::2], pairs[1::2], strict=True))
        return [query, bound[query]]
