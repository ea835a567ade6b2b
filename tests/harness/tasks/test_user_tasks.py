"""A user's own task (registered in-tree or as a ``pezoo.tasks`` plugin) that breaks the
interface's rules is refused before any training, in one sentence naming the task, the
scale and what it returned; the built-in tasks all pass the same checks."""

from __future__ import annotations

import random
import sys
import textwrap
from importlib import metadata

import pytest
from click.testing import CliRunner
from fake_entry_points import fake_entry_points

import harness.tasks as tasks
from harness.cli import main
from harness.config import preset_config
from harness.execution.preflight import check_run
from harness.tasks.base import NOT_PE_SOLVABLE, TASKS, Example, Task, register_task
from harness.tasks.checks import check_instances
from pezoo import PluginClashError


class Digits(Task):
    """A valid user task: copy n digits."""

    name = "user_copy"
    source = "a user"
    layout = "digits = digits"
    pe_solvability = NOT_PE_SOLVABLE
    pe_solvability_basis = "a test"
    vocabulary = tuple("0123456789")

    def sample_prompt(self, n: int, rng: random.Random) -> list[str]:
        return [str(rng.randint(0, 9)) for _ in range(n)]

    def solve(self, prompt: tuple[str, ...]) -> list[str]:
        return list(prompt)


def _hostile(**methods: object) -> type[Task]:
    return type("Hostile", (Digits,), dict(methods))


HOSTILE = {  # what the generator does wrong -> (the task, words the message must hold)
    "token outside the shared vocabulary": (
        _hostile(sample_prompt=lambda self, n, rng: ["Z"] * n),
        ["sample(1)", "token 'Z'", "not in the shared vocabulary"],
    ),
    "ints for tokens": (
        _hostile(sample_prompt=lambda self, n, rng: [rng.randint(0, 9) for _ in range(n)]),
        ["sample(1)", "(int)", "strings"],
    ),
    "token outside its declared vocabulary": (
        _hostile(sample_prompt=lambda self, n, rng: ["+"] * n),
        ["token '+'", "declared vocabulary"],
    ),
    "empty target": (_hostile(solve=lambda self, p: []), ["sample(1)", "empty target"]),
    "EOS inside the target": (_hostile(solve=lambda self, p: [*p, "<eos>"]), ["'<eos>'", "layout"]),
    "= inside the prompt": (_hostile(sample_prompt=lambda self, n, rng: ["1", "="] * n), ["'='", "misread"]),
    "the global random module": (
        _hostile(sample_prompt=lambda self, n, rng: [str(random.randint(0, 9)) for _ in range(20 * n)]),
        ["different instances from equal seeds", "random.Random it is given"],
    ),
    "the scale ignored": (
        _hostile(sample_prompt=lambda self, n, rng: [str(rng.randint(0, 9)) for _ in range(3)]),
        ["test scale 8", "training scale 1", "no longer"],
    ),
    "another scale recorded": (
        _hostile(sample=lambda self, n, rng: Example(tuple(self.sample_prompt(n, rng)), ("1",), n + 100)),
        ["scale 101", "asked for scale 1"],
    ),
    "a target that is not solve(prompt)": (
        _hostile(sample=lambda self, n, rng: Example(("1",) * n, ("1", "2"), n)),
        ["the target ('1', '2')", "solve()", "function of the prompt"],
    ),
    "a mask of the wrong length": (_hostile(accuracy_mask=lambda self, t: (True,)), ["accuracy mask (True,)"]),
    "output_length that the targets do not have": (
        _hostile(output_length=lambda self, n: n + 1),
        ["output_length(1) says 2"],
    ),
    "a generator that raises": (
        _hostile(sample_prompt=lambda self, n, rng: [1 / 0]),
        ["sample(1) raised ZeroDivisionError"],
    ),
    "a test distribution with a foreign token": (
        _hostile(sample_test=lambda self, n, rng: Example(("Z",) * n, ("Z",) * n, n)),
        ["sample_test(6)", "token 'Z'"],
    ),
}


@pytest.fixture
def registry(monkeypatch):
    """TASKS restored afterwards: ``registry(cls, name)`` registers ``cls`` under ``name``."""
    monkeypatch.setattr(TASKS, "_factories", dict(TASKS._factories))
    monkeypatch.setattr(TASKS, "broken", {})

    def install(cls: type[Task], name: str) -> None:
        register_task(type(cls.__name__, (cls,), {"name": name}))

    return install


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_user_task_is_refused_before_training_naming_it(case, registry):
    cls, words = HOSTILE[case]
    registry(cls, "user_hostile")
    cfg = preset_config("smoke", pe="nope", task="user_hostile", seed=0)  # train 1..5, test 6..8
    with pytest.raises(ValueError) as info:
        check_run(cfg)
    message = str(info.value)
    assert message.startswith("task 'user_hostile': ") and "\n" not in message
    for word in words:
        assert word in message


def test_bench_refuses_a_hostile_task_in_one_line_before_writing_anything(registry, tmp_path):
    registry(HOSTILE["empty target"][0], "user_hostile")
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(
        main, ["bench", "--pe", "nope", "--task", "user_hostile", "--preset", "smoke", "--store", str(store)]
    )
    assert result.exit_code == 2 and "task 'user_hostile': sample(1) returned an empty target" in result.output
    assert not store.exists()


def test_a_valid_user_task_passes(registry):
    registry(Digits, "user_copy")
    check_run(preset_config("smoke", pe="nope", task="user_copy", seed=0))


@pytest.mark.parametrize("name", tasks.available())
def test_every_built_in_task_passes_the_checks(name):
    """At its declared scales and at the smoke preset's (1..5, then 6..8)."""
    task = tasks.create(name)
    (a, b), (c, d) = task.train_scales, task.test_scales
    check_instances(task, range(a, b + 1), range(c, min(d, 100) + 1), draws=2)
    check_instances(task, range(1, 6), range(6, 9), draws=2)


def test_register_task_refuses_a_non_task_and_a_language_modelling_name(registry):
    with pytest.raises(TypeError, match=r"subclass of harness\.tasks\.Task"):
        register_task(dict)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"'lm_en'.*language-modelling"):
        registry(Digits, "lm_en")
    assert "lm_en" not in TASKS


@pytest.mark.parametrize("bad", ["my:task", "a+b", "opts{", "v@1", "a,b", "a b", ""])
def test_task_names_follow_the_encoding_name_rules(bad, registry):
    with pytest.raises(ValueError, match="task name"):
        registry(Digits, bad)


def test_create_refuses_a_class_whose_name_is_not_its_key(registry):
    TASKS.register("user_key", Digits)  # Digits.name is "user_copy"
    with pytest.raises(ValueError, match=r"'user_key'.*name = 'user_copy'"):
        tasks.create("user_key")


class NeedsAnArgument(Digits):
    def __init__(self, k: int) -> None:
        self.k = k


def test_a_task_whose_constructor_needs_an_argument_is_one_line_from_bench(registry, tmp_path):
    registry(NeedsAnArgument, "user_needs")
    store = tmp_path / "store.sqlite"
    result = CliRunner().invoke(
        main, ["bench", "--pe", "nope", "--task", "user_needs", "--preset", "smoke", "--store", str(store)]
    )
    assert result.exit_code == 2 and "task 'user_needs' cannot be made" in result.output
    assert "missing 1 required positional argument: 'k'" in result.output


PLUGIN = textwrap.dedent(
    """
    import random
    from harness.tasks import Task

    class Unnamed(Task):
        source = layout = pe_solvability_basis = "a plugin"
        pe_solvability = "not_pe_solvable"
        def sample_prompt(self, n, rng):
            return [str(rng.randint(0, 9)) for _ in range(n)]
        def solve(self, prompt):
            return list(prompt)

    class NotATask:
        pass
    """
)


@pytest.fixture
def plugins(monkeypatch, tmp_path, registry):
    """Install fake ``pezoo.tasks`` entry points: ``plugins(name=value, ...)``; TASKS is restored."""
    (tmp_path / "fake_task_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))

    def install(**points: str) -> None:
        eps = [metadata.EntryPoint(name, value, "pezoo.tasks") for name, value in points.items()]
        monkeypatch.setattr(metadata, "entry_points", fake_entry_points(eps))
        monkeypatch.setattr(TASKS, "_entry_points_loaded", False)

    sys.modules.pop("fake_task_plugin", None)  # a fresh import per test: loading sets the class's name
    yield install
    sys.modules.pop("fake_task_plugin", None)


def test_a_plugin_task_takes_its_entry_point_key_as_name_and_runs_the_checks(plugins):
    plugins(plugin_copy="fake_task_plugin:Unnamed")
    task = tasks.create("plugin_copy")
    assert task.name == "plugin_copy"
    check_run(preset_config("smoke", pe="nope", task="plugin_copy", seed=0))


def test_a_plugin_naming_no_task_class_does_not_load(plugins):
    plugins(not_a_task="fake_task_plugin:NotATask")
    assert "not_a_task" in TASKS.load_plugins()
    assert "not a Task subclass" in TASKS.broken["not_a_task"]


def test_a_plugin_named_like_a_language_modelling_task_is_a_clash(plugins):
    plugins(lm_code="fake_task_plugin:Unnamed")
    with pytest.raises(PluginClashError, match=r"'lm_code'.*language-modelling"):
        tasks.bench_tasks()
    result = CliRunner().invoke(main, ["bench", "--pe", "nope", "--task", "lm_code", "--preset", "lm_smoke"])
    assert result.exit_code == 1 and "language-modelling task of the harness" in result.output
