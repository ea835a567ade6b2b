"""The shared 64-token vocabulary every task is written in.

Tokens are strings: single characters for digits and symbols, whole words for SCAN.
Ids are stable: new tokens are only ever appended (ids below are part of stored
checkpoints), and the total never exceeds ``VOCAB_SIZE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

VOCAB_SIZE = 64
PAD, EOS = "<pad>", "<eos>"

_TOKENS: tuple[str, ...] = (
    PAD, EOS, "=", ".",
    *"0123456789",
    "+", "-", "*", "x", ",", "→", "(", ")", "[", "]", ":", "_",
    # SCAN (Lake & Baroni 2018): command words, then output actions
    "walk", "look", "run", "jump", "turn", "left", "right", "opposite", "around",
    "twice", "thrice", "and", "after",
    "I_WALK", "I_LOOK", "I_RUN", "I_JUMP", "I_TURN_LEFT", "I_TURN_RIGHT",
    # Turing Programs (Hou et al.): head-marked digits a=0 .. j=9, exhausted operand, line separator
    *"abcdefghij", "^", "|",
    # solve_equation (Delétang et al.): the equation's own "=", kept apart from the prompt separator
    "≡",
    # beginning of sequence: the harness starts every sequence with it (an anchor NoPE can count from)
    "<bos>",
    # flip-flop (Liu et al. 2023): its write and read instructions (ignore is the letter "i" above)
    "w", "r",
)  # fmt: skip
assert len(_TOKENS) <= VOCAB_SIZE and len(set(_TOKENS)) == len(_TOKENS)

TOKENS: tuple[str, ...] = _TOKENS
TOKEN_ID: dict[str, int] = {t: i for i, t in enumerate(TOKENS)}
PAD_ID, EOS_ID, SEP_ID, BOS_ID = TOKEN_ID[PAD], TOKEN_ID[EOS], TOKEN_ID["="], TOKEN_ID["<bos>"]


def encode(tokens: Iterable[str]) -> list[int]:
    """Token strings -> ids; an unknown token is an error that names it."""
    out = []
    for t in tokens:
        try:
            out.append(TOKEN_ID[t])
        except KeyError:
            raise ValueError(f"token {t!r} is not in the shared vocabulary") from None
    return out


def decode(ids: Sequence[int]) -> list[str]:
    """Ids -> token strings (ids past the defined tokens decode as ``<unused:N>``)."""
    return [TOKENS[i] if i < len(TOKENS) else f"<unused:{i}>" for i in ids]


def to_text(tokens: Sequence[str]) -> str:
    """Human-readable text: characters joined directly, words separated by spaces."""
    if all(len(t) == 1 for t in tokens):
        return "".join(tokens)
    return " ".join(tokens)
