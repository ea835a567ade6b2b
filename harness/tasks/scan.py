"""scan: SCAN commands -> action sequences, generated from the grammar (Lake & Baroni 2018).

No data files: the full command set is enumerated from the phrase-structure grammar

    C -> S | S and S | S after S          S -> V | V twice | V thrice
    V -> X | X left | X right | X opposite left | X opposite right
           | X around left | X around right          (X a primitive or ``turn``; bare ``turn`` excluded)

with the interpretation [[walk]] = I_WALK (look, run, jump likewise), [[turn]] = nothing,
[[X dir]] = T(dir) [[X]], [[X opposite dir]] = T(dir) T(dir) [[X]],
[[X around dir]] = (T(dir) [[X]]) x 4, [[V twice]] = [[V]] [[V]], [[V thrice]] = [[V]] [[V]] [[V]],
[[S1 and S2]] = [[S1]] [[S2]], [[S1 after S2]] = [[S2]] [[S1]], T(left) = I_TURN_LEFT,
T(right) = I_TURN_RIGHT. That is 34 clauses V, 102 phrases S and 20,910 commands C.

The length split puts commands with <= 22 actions in train (16,990) and the rest in
test (3,920; 24..48 actions, no command has 23). ``length_split()`` returns it as
(command, actions) string pairs; the ``scan`` task samples it by action count.

jump twice after walk left = I_TURN_LEFT I_WALK I_JUMP I_JUMP
"""

from __future__ import annotations

import functools
import random
from collections import defaultdict

from harness.tasks.base import NOT_PE_SOLVABLE, Task, register_task

PRIMITIVES = ("walk", "look", "run", "jump")
DIRECTIONS = ("left", "right")
ACTION = {"walk": "I_WALK", "look": "I_LOOK", "run": "I_RUN", "jump": "I_JUMP"}
TURN = {"left": "I_TURN_LEFT", "right": "I_TURN_RIGHT"}
REPEATS = {"twice": 2, "thrice": 3}
CONJUNCTIONS = ("and", "after")
SPLIT_MAX_TRAIN_ACTIONS = 22
COMMAND_WORDS = (*PRIMITIVES, "turn", *DIRECTIONS, "opposite", "around", *REPEATS, *CONJUNCTIONS)
ACTIONS = (*ACTION.values(), *TURN.values())
SCAN_SOLVABILITY_BASIS = (
    "derived, Chen et al. §III, §V: parse-dependent positions, increasing CRC under a position-only CR"
)


def clauses() -> list[str]:
    """The 34 clauses V of the grammar, in a fixed order."""
    out = list(PRIMITIVES)
    for x in (*PRIMITIVES, "turn"):
        for d in DIRECTIONS:
            out += [f"{x} {d}", f"{x} opposite {d}", f"{x} around {d}"]
    return out


def clause_actions(clause: list[str] | tuple[str, ...]) -> list[str]:
    """[[V]] for one clause given as words."""
    x, *rest = clause
    act = [] if x == "turn" else [ACTION[x]]
    if not rest:
        return act
    turn = TURN[rest[-1]]
    if len(rest) == 1:
        return [turn, *act]
    if rest[0] == "opposite":
        return [turn, turn, *act]
    return [turn, *act] * 4  # around


def phrase_clauses(phrase: list[str] | tuple[str, ...]) -> list[tuple[str, ...]]:
    """S -> the clauses it runs, in order (V twice -> [V, V])."""
    if phrase[-1] in REPEATS:
        return [tuple(phrase[:-1])] * REPEATS[phrase[-1]]
    return [tuple(phrase)]


def split_command(command: list[str] | tuple[str, ...]) -> tuple[tuple[str, ...], str | None, tuple[str, ...]]:
    """C -> (S1, conjunction, S2), with conjunction None and S2 empty for a bare S."""
    for i, w in enumerate(command):
        if w in CONJUNCTIONS:
            return tuple(command[:i]), w, tuple(command[i + 1 :])
    return tuple(command), None, ()


def execution_clauses(command: list[str] | tuple[str, ...]) -> list[tuple[str, ...]]:
    """The clauses of a command in execution order (``after`` runs its right side first)."""
    first, conj, second = split_command(command)
    if conj is None:
        return phrase_clauses(first)
    if conj == "and":
        return phrase_clauses(first) + phrase_clauses(second)
    return phrase_clauses(second) + phrase_clauses(first)


def interpret(command: str) -> str:
    """The action sequence of a command (both as space-separated words)."""
    return " ".join(a for c in execution_clauses(command.split()) for a in clause_actions(c))


@functools.cache
def _all_pairs() -> tuple[tuple[str, str], ...]:
    phrases = [f"{v}{suffix}" for v in clauses() for suffix in ("", " twice", " thrice")]
    commands = list(phrases)
    commands += [f"{s1} {conj} {s2}" for conj in CONJUNCTIONS for s1 in phrases for s2 in phrases]
    return tuple((c, interpret(c)) for c in commands)


def all_commands() -> list[tuple[str, str]]:
    """All 20,910 (command, actions) pairs of SCAN."""
    return list(_all_pairs())


def length_split() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """SCAN's length split: (train, test) (command, actions) pairs; train has <= 22 actions."""
    pairs = _all_pairs()
    train = [p for p in pairs if len(p[1].split()) <= SPLIT_MAX_TRAIN_ACTIONS]
    test = [p for p in pairs if len(p[1].split()) > SPLIT_MAX_TRAIN_ACTIONS]
    return train, test


@functools.cache
def commands_by_action_count() -> dict[int, tuple[str, ...]]:
    """Action count -> the commands with that many actions (in enumeration order)."""
    groups: dict[int, list[str]] = defaultdict(list)
    for command, actions in _all_pairs():
        groups[len(actions.split())].append(command)
    return {k: tuple(v) for k, v in sorted(groups.items())}


class ScanBase(Task):
    """Shared sampling of the SCAN tasks: scale n = number of output actions; an instance
    of scale n is a command drawn uniformly among those with exactly n actions."""

    train_scales = (1, SPLIT_MAX_TRAIN_ACTIONS)
    test_scales = (24, 48)
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = SCAN_SOLVABILITY_BASIS

    def has_scale(self, n: int) -> bool:
        return n in commands_by_action_count()

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return rng.choice(commands_by_action_count()[n]).split()


@register_task
class Scan(ScanBase):
    """A SCAN command -> its action sequence (length split by action count)."""

    name = "scan"
    source = "Lake & Baroni 2018 (SCAN), length split"
    metric = "exact_match"
    vocabulary = (*COMMAND_WORDS, *ACTIONS)
    layout = "command words = action tokens"

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return interpret(" ".join(prompt)).split()
