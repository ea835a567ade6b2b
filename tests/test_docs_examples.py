"""Every ```python example of README.md and docs/**/*.md, run.

One test per block, named by its page and the line of its opening fence
(``docs/use-in-your-model.md:204``). A page's blocks run in order in one namespace, as a
reader runs the page top to bottom: a block may use what a block above it defined. Each
page starts from an empty namespace (a module of its own, so that a class a block defines
pickles) in a temporary working folder of its own (an example that writes files writes
there). After a block fails, the blocks below it on its page are skipped, naming it: the
first failure is the one to read. A block run alone (``-k``) first runs those above it.
Tracebacks point at the page and line (``docs/interface.md``, line 151).

Markers, HTML comments a rendered page does not show (docs/README.md, "Examples are tested"):

* ``<!-- docs-test: skip REASON -->`` directly above the opening fence: not run. The
  reason is required.
* ``<!-- docs-test: setup CODE -->`` directly above the opening fence: CODE (the rest of
  the line, or the lines up to ``-->``) runs first, in the page's namespace, with
  stand-ins for what the example takes as given (your model's ``dims``, a checkpoint;
  the longer ones are in tests/docs_setups.py).
* ``<!-- docs-test: check CODE -->`` directly below the closing fence: CODE runs after
  the block, asserting what its comments say.

A marker that is attached to no ```python block, of an unknown kind, or without its
reason or code is a failure. ```bash, ```toml and other blocks are not run.
"""

from __future__ import annotations

import re
import sys
import textwrap
import traceback
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docs_setups
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PYTHON = {"python", "py", "python3"}
KINDS = ("skip", "setup", "check")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
MARKER = re.compile(r"^ {0,3}<!--\s*docs-test:")


@dataclass
class Block:
    """One ```python block of a page, with the markers attached to it."""

    page: str  # relative to the repository, as in the test id
    index: int  # its place among its page's python blocks
    line: int  # its opening fence's line (1-based)
    end: int  # its closing fence's line
    code: str
    skip: str | None = None
    setup: tuple[int, str] | None = None  # (the line its code starts on, the code)
    check: tuple[int, str] | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Marker:
    first: int  # its lines (1-based)
    last: int
    kind: str
    code_line: int  # the line its text starts on
    text: str


def _marker(lines: list[str], i: int) -> tuple[Marker | None, int, str | None]:
    """The marker starting at ``lines[i]``: (the marker, its last line's index, a problem)."""
    rest = lines[i].split("docs-test:", 1)[1]
    body, j = [rest], i
    while "-->" not in body[-1]:
        j += 1
        if j == len(lines):
            return None, j - 1, f"line {i + 1}: a docs-test marker without its closing -->"
        body.append(lines[j])
    body[-1] = body[-1].split("-->", 1)[0]
    words = body[0].split(None, 1)
    kind = words[0] if words else ""
    inline = words[1].strip() if len(words) > 1 else ""
    text_lines = ([inline] if inline else []) + textwrap.dedent("\n".join(body[1:])).split("\n")
    code_line = i + 1 if inline else i + 2
    while text_lines and not text_lines[0].strip():
        text_lines.pop(0)
        code_line += 1
    return Marker(i + 1, j + 1, kind, code_line, "\n".join(text_lines).rstrip()), j, None


def parse(page: str, text: str) -> tuple[list[Block], list[str]]:
    """A page's ```python blocks with their markers, and the page's problems with markers
    that belong to no block (each problem names its line)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    markers: list[Marker] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            mark = fence["fence"]
            closing = re.compile(rf"^ {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}\s*$")
            j = i + 1
            while j < len(lines) and not closing.match(lines[j]):
                j += 1
            info = fence["info"].split()
            if info and info[0].lower() in PYTHON:
                code = textwrap.dedent("\n".join(lines[i + 1 : j]))
                blocks.append(Block(page, len(blocks), i + 1, j + 1, code))
            i = j + 1
            continue
        if MARKER.match(lines[i]):
            marker, i, problem = _marker(lines, i)
            if problem:
                problems.append(problem)
            if marker:
                markers.append(marker)
        i += 1
    above = {b.line - 1: b for b in blocks}
    below = {b.end + 1: b for b in blocks}
    for m in markers:
        block = below.get(m.first) if m.kind == "check" else above.get(m.last)
        where = f"line {m.first}: docs-test marker {m.kind!r}"
        if block is None:
            side = "below a ```python block's closing fence" if m.kind == "check" else "above a ```python block"
            problems.append(f"{where} is not directly {side}")
        elif m.kind not in KINDS:
            block.problems.append(f"{where}: unknown, the kinds are {', '.join(KINDS)}")
        elif m.kind == "skip":
            block.skip = m.text.strip().removeprefix("(").removesuffix(")").strip()
            if not block.skip:
                block.problems.append(f"{where} names no reason: say why the example cannot run here")
        elif not m.text.strip():
            block.problems.append(f"{where} has no code")
        elif m.kind == "setup":
            block.setup = (m.code_line, m.text)
        else:
            block.check = (m.code_line, m.text)
    return blocks, problems


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


PARSED = {str(p.relative_to(ROOT)): parse(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in pages()}
BLOCKS = [block for blocks, _ in PARSED.values() for block in blocks]


@dataclass
class PageRun:
    """One page's examples as they run: its namespace, its folder, how far it got."""

    module: types.ModuleType
    folder: Path
    done: int = 0  # its blocks run (or passed over) so far
    failed: str | None = None  # the id of the block that failed


class PageRuns:
    """The pages' runs in this session; the page now running is the last started."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.runs: dict[str, PageRun] = {}
        self.current: str | None = None
        self.tmp_path_factory = tmp_path_factory

    def of(self, block: Block) -> PageRun:
        if block.page != self.current:
            docs_setups.CLEANUP.close()  # undo what the previous page's setups changed
            self.current = block.page
        run = self.runs.get(block.page)
        if run is None or run.done > block.index:  # a new page (or this one again): start afresh
            name = "docs_example_" + re.sub(r"\W", "_", block.page)
            module = types.ModuleType(name, f"{block.page}'s examples, as tests/test_docs_examples.py runs them")
            sys.modules[name] = module  # so that pickle finds a class an example defines
            run = self.runs[block.page] = PageRun(module, self.tmp_path_factory.mktemp(name))
        return run


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageRuns]:
    runs = PageRuns(tmp_path_factory)
    yield runs
    docs_setups.CLEANUP.close()
    for run in runs.runs.values():
        sys.modules.pop(run.module.__name__, None)


def _exec(code: str, line: int, page: str, namespace: dict) -> None:
    """Run ``code``, which starts on ``line`` of ``page``, so that tracebacks name that line."""
    exec(compile("\n" * (line - 1) + code, str(ROOT / page), "exec"), namespace)


def _run_block(block: Block, namespace: dict) -> None:
    torch.manual_seed(0)
    if block.setup:
        _exec(block.setup[1], block.setup[0], block.page, namespace)
    _exec(block.code, block.line + 1, block.page, namespace)
    if block.check:
        _exec(block.check[1], block.check[0], block.page, namespace)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_example(block, page_runs, monkeypatch):
    if block.problems:
        pytest.fail(f"{block.page}: " + "; ".join(block.problems), pytrace=False)
    if block.skip:
        pytest.skip(block.skip)
    run = page_runs.of(block)
    monkeypatch.chdir(run.folder)
    for above in PARSED[block.page][0][run.done : block.index]:  # run alone: the page's blocks above it first
        run.done += 1
        if not (above.skip or above.problems or run.failed):
            try:
                _run_block(above, run.module.__dict__)
            except pytest.skip.Exception:
                pass
            except Exception:
                run.failed = above.id
    if run.failed:
        pytest.skip(f"{run.failed}, above it on its page, failed")
    run.done = block.index + 1
    try:
        _run_block(block, run.module.__dict__)
    except Exception as exc:
        run.failed = block.id
        pytest.fail(_explained(exc), pytrace=False)


def _explained(exc: Exception) -> str:
    """The traceback from the page's line on (what the example called), without this module's frames."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.endswith(".md"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def test_the_pages_have_examples_and_every_marker_belongs_to_one():
    assert any(page == "README.md" for page, (blocks, _) in PARSED.items() if blocks)
    assert len(BLOCKS) >= 10, "the docs' ```python blocks were not found"
    problems = [f"{page}: {problem}" for page, (_, page_problems) in PARSED.items() for problem in page_problems]
    assert not problems, "\n".join(problems)


PAGE = """\
# A page

<!-- docs-test: setup x = 1 -->
```python
y = x + 1
```
<!-- docs-test: check
assert y == 2
-->

````markdown
```python
not run: inside another fence
```
````

<!-- docs-test: skip -->
```python
z = 3
```

<!-- docs-test: skip (needs a GPU) -->

```python
w = 4
```

<!-- docs-test: sikp (typo) -->
```py
v = 5
```
"""


def test_the_markers_are_read_as_documented():
    blocks, problems = parse("page.md", PAGE)
    assert [b.line for b in blocks] == [4, 18, 24, 29]
    first, no_reason, detached, unknown = blocks
    assert first.setup == (3, "x = 1") and first.check == (8, "assert y == 2") and not first.problems
    namespace: dict = {}
    _run_block(first, namespace)
    assert namespace["y"] == 2
    assert no_reason.skip == "" and "names no reason" in no_reason.problems[0]
    assert detached.skip is None and problems == [
        "line 22: docs-test marker 'skip' is not directly above a ```python block"
    ]
    assert "unknown" in unknown.problems[0]
