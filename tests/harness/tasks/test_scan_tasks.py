"""SCAN from its grammar (Lake & Baroni 2018): the command set, the length split, the plain
task and the PRISM paper's chain-of-thought expansion, against an independent interpreter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import harness.tasks as tasks
from harness.tasks import scan


def gold(command: str) -> list[str]:
    """An interpreter written from the paper's semantics, by string rewriting."""
    if " and " in command:
        left, right = command.split(" and ")
        return gold(left) + gold(right)
    if " after " in command:
        left, right = command.split(" after ")
        return gold(right) + gold(left)
    for word, times in (("twice", 2), ("thrice", 3)):
        if command.endswith(" " + word):
            return gold(command.removesuffix(" " + word)) * times
    words = command.split()
    verb = [] if words[0] == "turn" else ["I_" + words[0].upper()]
    if len(words) == 1:
        return verb
    turn = ["I_TURN_" + words[-1].upper()]
    if "opposite" in words:
        return turn + turn + verb
    if "around" in words:
        return (turn + verb) * 4
    return turn + verb


PAPER_EXAMPLES = [  # Lake & Baroni 2018, Fig. 1 / Table 1 style examples
    ("jump", "I_JUMP"),
    ("jump left", "I_TURN_LEFT I_JUMP"),
    ("jump around right", "I_TURN_RIGHT I_JUMP " * 3 + "I_TURN_RIGHT I_JUMP"),
    ("turn left twice", "I_TURN_LEFT I_TURN_LEFT"),
    ("jump thrice", "I_JUMP I_JUMP I_JUMP"),
    ("jump opposite left and walk thrice", "I_TURN_LEFT I_TURN_LEFT I_JUMP I_WALK I_WALK I_WALK"),
    ("jump opposite left after walk around left", "I_TURN_LEFT I_WALK " * 4 + "I_TURN_LEFT I_TURN_LEFT I_JUMP"),
]


@pytest.mark.parametrize(("command", "actions"), PAPER_EXAMPLES)
def test_interpretation_examples(command, actions):
    assert scan.interpret(command) == actions
    assert gold(command) == actions.split()


def test_command_set_and_length_split():
    pairs = scan.all_commands()
    assert len(pairs) == 20_910 and len({c for c, _ in pairs}) == 20_910
    train, test = scan.length_split()
    assert (len(train), len(test)) == (16_990, 3_920)
    assert all(len(a.split()) <= 22 for _, a in train)
    assert {len(a.split()) for _, a in test} <= set(range(24, 49)) and max(len(a.split()) for _, a in test) == 48
    for command, actions in pairs:
        assert actions.split() == gold(command), command
        assert "  " not in command and "  " not in actions


def test_grammar_counts():
    """34 clauses, 102 phrases, 102 + 2 * 102^2 commands."""
    assert len(scan.clauses()) == 34
    assert len(scan.all_commands()) == 102 + 2 * 102**2


def test_missing_length_is_a_clear_error():
    task = tasks.create("scan")
    assert not task.has_scale(23) and task.has_scale(24) and not task.has_scale(49)
    with pytest.raises(ValueError, match="no instance of scale 23"):
        task.sample(23, random.Random(0))
    assert all(task.has_scale(n) for n in range(1, 23))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from(sorted(scan.commands_by_action_count())))
def test_scan_task(seed, n):
    ex = tasks.create("scan").sample(n, random.Random(seed))
    assert len(ex.target) == n and list(ex.target) == gold(" ".join(ex.prompt))


def expected_step1(command: str) -> str:
    def expand(phrase: str) -> str:
        for word, times in (("twice", 2), ("thrice", 3)):
            if phrase.endswith(" " + word):
                return " + ".join([phrase.removesuffix(" " + word)] * times)
        return phrase

    for conj in (" and ", " after "):
        if conj in command:
            left, right = command.split(conj)
            return expand(left) + conj + expand(right)
    return expand(command)


def parse_step2(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """``clause : actions clause : actions ...`` -> [(clause, actions)]."""
    groups: list[tuple[str, list[str]]] = []
    words: list[str] = []
    for tok in tokens:
        if tok == ":":
            groups.append((" ".join(words), []))
            words = []
        elif tok.startswith("I_"):
            groups[-1][1].append(tok)
        else:
            words.append(tok)
    assert not words
    return groups


def test_scan_cot_on_every_command():
    task = tasks.create("scan_cot")
    longest = 0
    for command, actions in scan.all_commands():
        target = task.solve(tuple(command.split()))
        assert target[-1] == "." and target.count("→") == 1
        arrow = target.index("→")
        assert " ".join(target[:arrow]) == expected_step1(command)
        groups = parse_step2(target[arrow + 1 : -1])
        assert [a for _, clause_actions in groups for a in clause_actions] == actions.split()
        assert all(gold(clause) == clause_actions for clause, clause_actions in groups)
        longest = max(longest, len(command.split()) + 1 + len(target))
    assert longest == 107  # prompt = completion, as the PRISM paper's Table 3 example shows


def test_scan_cot_paper_examples():
    task = tasks.create("scan_cot")
    walk_around_left = "walk around left : " + "I_TURN_LEFT I_WALK " * 4
    cases = {
        "walk around left thrice and look opposite right": (
            "walk around left + walk around left + walk around left and look opposite right → "
            + walk_around_left * 3
            + "look opposite right : I_TURN_RIGHT I_TURN_RIGHT I_LOOK ."
        ),
        "jump after walk left twice": (
            "jump after walk left + walk left → walk left : I_TURN_LEFT I_WALK walk left : I_TURN_LEFT I_WALK "
            "jump : I_JUMP ."
        ),
    }
    for command, target in cases.items():
        assert " ".join(task.solve(tuple(command.split()))) == target


def test_scales_follow_the_split():
    for name in ("scan", "scan_cot"):
        task = tasks.create(name)
        assert task.train_scales == (1, 22) and task.test_scales == (24, 48)
