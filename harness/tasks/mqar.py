"""mqar: multi-query associative recall (Zoology, Arora et al. 2023, §3: MQAR).

Arora, Eyuboglu et al., "Zoology: Measuring and Improving Recall in Efficient Language
Models" (arXiv 2312.04927): a sequence binds n distinct keys to values, then asks for
keys; each answer is the value bound to its key earlier. Here the prompt is the n
key-value pairs, ``:``, and every key once more as a query, in a uniformly random order;
the target is the queried keys' values in query order (no ``.``: not a PRISM task).

walk 3 ( 7 f 3 : f walk ( = 3 3 7

Scale n = the number of key-value pairs = the number of queries; the prompt is 3n + 1
tokens and the target n. Keys are n distinct tokens drawn uniformly without replacement
from the 43 non-digit tokens of ids 14..57 of the shared vocabulary (symbols, SCAN words,
the Turing-Program letters, ``^ | ≡``; ``:`` excluded), so n is at most 43; values are
digits drawn uniformly with replacement.

Against the paper (its Fig. 2 and the Zoology code's ``multiquery_ar``): as there, keys are
distinct, each key is queried exactly once, queries come in random order, and keys and
values are disjoint alphabets. The code draws keys and values from the two halves of an
8192-token vocabulary, both without replacement; 64 tokens allow 43 keys and 10 values,
so values repeat here (and a value is not implied by the others). The paper's stream
places each query at a power-law-distributed gap among random filler tokens, its value
the next token (the loss only there); here, in the harness's prompt-then-target layout,
the queries follow the pairs directly and their values are answered together after
``=``, so the i-th answer also needs the i-th query, n tokens back from where it is
predicted, as copy does. The paper scales sequence length (64..512) with the pairs
(4..64); here the length follows n alone.
"""

from __future__ import annotations

import random

from harness.tasks import vocab
from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task
from harness.tasks.copy import DIGITS

QUERIES = ":"
"""Between the key-value pairs and the queries."""

KEYS: tuple[str, ...] = tuple(t for t in vocab.TOKENS[14:58] if t != QUERIES)
"""The key alphabet: the 43 non-digit tokens of ids 14..57, fixed (the vocabulary only
grows at the end, so a later token never joins it and the draws stay reproducible)."""

VALUES = DIGITS


def sample_pairs(n: int, rng: random.Random) -> tuple[list[str], list[str]]:
    """n distinct keys and the prompt's pairs ``k₁ v₁ … kₙ vₙ`` binding them to digit values
    drawn with replacement (mqar's and associative_recall's draws, in this order)."""
    keys = rng.sample(KEYS, n)
    values = rng.choices(VALUES, k=n)
    return keys, [t for pair in zip(keys, values, strict=True) for t in pair]


@register_task
class Mqar(Task):
    """n key-value pairs, then the n keys as queries in random order -> their values."""

    name = "mqar"
    source = "Arora et al. 2023 (Zoology), §3: multi-query associative recall"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 40)
    max_scale = len(KEYS)
    vocabulary = (*KEYS, *VALUES, QUERIES)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: each answer's parent, the value after its queried key, is found by content"
    )
    layout = "k₁ v₁ … kₙ vₙ : q₁ … qₙ = v(q₁) … v(qₙ)"

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        keys, pairs = sample_pairs(n, rng)
        return [*pairs, QUERIES, *rng.sample(keys, n)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        split = prompt.index(QUERIES)
        pairs, queries = prompt[:split], prompt[split + 1 :]
        bound = dict(zip(pairs[0::2], pairs[1::2], strict=True))
        return [bound[q] for q in queries]
