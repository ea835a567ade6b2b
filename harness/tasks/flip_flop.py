"""flip_flop: the bit of the last write, read at the end (flip-flop language, Liu et al. 2023).

Liu, Ash, Goel, Krishnamurthy & Zhang, "Exposing Attention Glitches with Flip-Flop
Language Modeling" (arXiv 2306.00946), §3: a string of instructions, each followed by a
bit: ``w b`` writes b to a one-bit memory, ``i b`` is ignored, ``r b`` reads the memory
(b is the bit of the most recent write). The first instruction is a write and the last a
read; the others are i.i.d. with p(w) = p(r) = (1 − p(i))/2, the bits of writes and
ignores uniform. The prompt is the whole string up to the final ``r``; the target is the
bit that read returns (no ``.``: not a PRISM task).

w 1 i 0 r 1 w 0 i 1 r = 0

Scale n = the number of instruction-bit pairs before the final read, the first a write
(n + 1 instructions in all); the prompt is 2n + 1 tokens and the target 1: 2n + 4 with
``=`` and EOS, one more than copy at the same scale. ``p_ignore`` (default 0.8, the
paper's canonical FFL(0.8): p(w) = p(r) = 0.1) sets p(i); the paper's other test
distributions are its sparse FFL(0.98), long runs of ignores, and dense FFL(0.1).

Against the paper: it trains and tests a language model on strings of one length (T = 512
tokens, 256 instructions), scoring its prediction of the bit after every read, and tests
out of distribution by changing p(i) (sparse, dense), not the length. Here the
harness's prompt-then-target layout scores one read, the final one, in a string of n + 1
instructions: it is the prediction the paper's model makes at its last read, from the
same string, the earlier reads' bits included (so the answer is also the bit of the last
``w`` or ``r``). The board trains on short strings and tests longer ones at FFL(0.8), so
the last write can lie further back than in any training string; the paper's sparse test
set stretches that distance at a fixed length by raising p(i) instead.
"""

from __future__ import annotations

import random

from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task

WRITE, IGNORE, READ = "w", "i", "r"
INSTRUCTIONS = (WRITE, IGNORE, READ)
BITS = ("0", "1")
P_IGNORE = 0.8
"""The paper's canonical p(i): FFL(0.8), writes and reads 0.1 each."""


@register_task
class FlipFlop(Task):
    """Instructions ``w b`` / ``i b`` / ``r b`` ending in a read -> the bit of the last write.

    Args:
        p_ignore: p(i) of the instructions between the first write and the final read;
            writes and reads share the rest equally (the paper's FFL(p_ignore)).
    """

    name = "flip_flop"
    source = "Liu et al. 2023 (flip-flop language modeling), §3: FFL(0.8), the final read"
    metric = "exact_match"
    train_scales = (1, 10)
    test_scales = (11, 40)
    vocabulary = (*INSTRUCTIONS, *BITS)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = (
        "derived, Chen et al. §III, §V: the answer's parent, the last write, is found by content at a distance that "
        "varies per instance"
    )
    layout = "w b₁ σ₂ b₂ … σₙ bₙ r = b (σ ∈ {w, i, r}; b: the last write's bit)"

    def __init__(self, *, p_ignore: float = P_IGNORE) -> None:
        if not 0.0 <= p_ignore <= 1.0:
            raise ValueError(f"p_ignore must be a probability in [0, 1], got {p_ignore!r}")
        self.p_ignore = p_ignore

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        p_write_or_read = (1.0 - self.p_ignore) / 2
        middle = rng.choices(INSTRUCTIONS, weights=(p_write_or_read, self.p_ignore, p_write_or_read), k=n - 1)
        prompt, memory = [], ""
        for op in (WRITE, *middle):
            bit = memory if op == READ else rng.choice(BITS)
            memory = bit if op == WRITE else memory
            prompt += [op, bit]
        return [*prompt, READ]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        written = [prompt[k + 1] for k in range(0, len(prompt) - 1, 2) if prompt[k] == WRITE]
        return [written[-1]]
