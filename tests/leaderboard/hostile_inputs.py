"""Hostile results records and diagnostics: strings that would run script if a page or
the README wrote them unescaped, and a checker that a built page holds them only as text.

Each payload, if it ever became markup, would set ``window.__pwned`` (and the page
title), so the browser test can see that nothing ran; the HTML checker sees the injected
element or attribute itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from leaderboard_fixtures import make_record

from harness.records.identity import config_run_id
from leaderboard.schema import Record, checksum

PAYLOADS = (
    "<img src=x onerror=\"window.__pwned=1;document.title='pwned'\">",
    "</script><script>window.__pwned=2;document.title='pwned'</script>",
    '"><svg onload="window.__pwned=3">',
    "'><svg/onload=window.__pwned=4>",
    "javascript:window.__pwned=5",
    "</title><script>window.__pwned=6</script>",
    "</style><script>window.__pwned=7</script>",
    "| a | b | [x](javascript:window.__pwned=8) ![i](x) {{ 7 * 7 }}",
)
EM = {1: 1.0, 2: 1.0, 3: 0.5, 4: 0.0}


def _reseal(record: dict[str, Any]) -> dict[str, Any]:
    record["run_id"] = config_run_id(record["config"])
    record["checksum"] = checksum(record)
    return record


def hostile_record(
    i: int, *, pe: str = "rope", task: str = "copy", seed: int = 0, free_names: bool = False
) -> dict[str, Any]:
    """A results record whose free-text fields carry payload ``i`` (and its neighbours).

    ``free_names``: the encoding and task names and the options carry payloads too; the
    schema may refuse such records, so only the renderer is fed them directly.
    """
    p = PAYLOADS[i % len(PAYLOADS)]
    record = make_record(pe, task, seed, EM, train_max=2, preset=f"preset {p}", device=f"cpu {p}")
    record["provenance"].update(
        commit=PAYLOADS[(i + 1) % len(PAYLOADS)],
        torch=PAYLOADS[(i + 2) % len(PAYLOADS)],
        pezoo=PAYLOADS[(i + 3) % len(PAYLOADS)],
        python=PAYLOADS[(i + 4) % len(PAYLOADS)],
    )
    record["config"]["preset"] = record["preset"]
    if free_names:
        record["pe"] = record["config"]["pe"] = f"{pe}{p}"
        record["task"] = record["config"]["task"] = f"{task}{p}"
        record["config"]["pe_options"] = {"x": PAYLOADS[(i + 5) % len(PAYLOADS)]}
    return _reseal(record)


def hostile_diagnostics(n_tokens: int = 6, *, free_numbers: bool = False) -> dict[str, Any]:
    """A PRISM diagnostics body whose tokens (and, with ``free_numbers``, its scale,
    train_max and layer name, which the schema may require to be numbers) carry payloads."""
    tokens = [PAYLOADS[t % len(PAYLOADS)] for t in range(n_tokens)]
    modes = [[list(range(n_tokens))], [[0] * n_tokens]]  # (h=2, c=1, s)
    confidence = [[[0.5] * n_tokens], [[1.0] * n_tokens]]
    layer = {"layer": 0, "support": n_tokens, "query_modes": modes, "key_modes": modes}
    layer.update(query_confidence=confidence, key_confidence=confidence)
    body: dict[str, Any] = {"version": 1, "scale": 4, "train_max": 2, "tokens": tokens, "layers": [layer]}
    if free_numbers:
        body.update(scale=PAYLOADS[0], train_max=PAYLOADS[2])
        body["layers"][0]["layer"] = PAYLOADS[1]
    return body


def hostile_board() -> tuple[list[Record], dict[str, dict[str, Any]]]:
    """Records (payloads everywhere, names included) and diagnostics (numbers too), for the renderer."""
    records = []
    for i, (pe, task) in enumerate([("rope", "copy"), ("nope", "copy"), ("prism", "copy"), ("rope", "reverse")]):
        data = hostile_record(i, pe=pe, task=task, free_names=pe != "prism")
        records.append(Record(data, Path(f"{PAYLOADS[(i + 4) % len(PAYLOADS)]}.jsonl".replace("/", "_")), 1))
    prism = next(r for r in records if r.data["pe"] == "prism")
    return records, {prism.run_id: hostile_diagnostics(free_numbers=True)}


# --------------------------------------------------------------------------------------
# Checking a page
# --------------------------------------------------------------------------------------

SITE_SVG_CLASSES = {"plot", "plot panel", "swatch", "plot trajectories"}
SITE_META = {"viewport", "generator"}
FOREIGN_TAGS = {"img", "iframe", "object", "embed", "image", "foreignobject", "base", "form"}


class _Scan(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.script: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        (self.script if self._in_script else self.text).append(data)


def injected(html: str) -> list[str]:
    """What in ``html`` cannot have come from the site's own templates: every problem found."""
    scan = _Scan()
    scan.feed(html)
    scan.close()
    problems = []
    scripts = [a for t, a in scan.tags if t == "script"]
    if len(scripts) != 1 or scripts[0]:
        problems.append(f"expected one inline <script> without attributes, found {scripts}")
    for tag, attrs in scan.tags:
        if tag in FOREIGN_TAGS or (tag == "meta" and not ("charset" in attrs or attrs.get("name") in SITE_META)):
            problems.append(f"injected <{tag}> {attrs}")
        if tag == "svg" and attrs.get("class") not in SITE_SVG_CLASSES:
            problems.append(f"injected <svg> {attrs}")
        for name, value in attrs.items():
            if name.startswith("on"):
                problems.append(f"<{tag}> has an event handler {name}={value!r}")
            if name in ("href", "src", "xlink:href", "action", "formaction") and value is not None:
                if value.strip().lower().replace("\t", "").replace("\n", "").startswith(("javascript:", "data:t")):
                    problems.append(f"<{tag} {name}={value!r}>")
    if any("__pwned" in s for s in scan.script):
        problems.append("a payload reached the inline script")
    return problems


def page_text(html: str) -> str:
    """The text a reader sees (entities decoded, script excluded)."""
    scan = _Scan()
    scan.feed(html)
    scan.close()
    return "".join(scan.text) + "".join(v or "" for _, a in scan.tags for v in a.values())


def all_payloads_in(text: str, payloads: Iterable[str] = PAYLOADS) -> list[str]:
    return [p for p in payloads if p not in text]
