"""A small DOM for tests: pages parsed into elements, so a test asserts on structure
(which table, which cells, which classes) and numbers instead of HTML or English text."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str | None] = field(default_factory=dict)
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    @property
    def text(self) -> str:
        """The text inside, whitespace collapsed (tags dropped)."""
        return re.sub(r"\s+", " ", "".join(self._texts())).strip()

    @property
    def own_text(self) -> str:
        """The text directly inside, not in child elements, whitespace collapsed."""
        return re.sub(r"\s+", " ", "".join(c for c in self.children if isinstance(c, str))).strip()

    def parts(self) -> list[str]:
        """The text of each child (text or element) that has any, in order."""
        out = [(c if isinstance(c, str) else c.text).strip() for c in self.children]
        return [re.sub(r"\s+", " ", t) for t in out if t]

    def _texts(self) -> Iterator[str]:
        for c in self.children:
            yield from ([c] if isinstance(c, str) else c._texts())

    def iter(self) -> Iterator[Element]:
        for c in self.children:
            if isinstance(c, Element):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        """Descendants with ``tag``, class ``cls`` and attribute values ``attrs`` (``data_x`` for ``data-x``)."""
        want = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes)
            and all(e.attrs.get(k) == v for k, v in want.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag or '*'}> of class {cls!r} with {attrs} in <{self.tag}>"
        return found[0]

    def rows(self) -> list[list[str]]:
        """A table's rows (head and body) as the text of their cells."""
        return [
            [c.text for c in tr.children if isinstance(c, Element) and c.tag in ("td", "th")]
            for tr in self.find_all("tr")
        ]

    def body_rows(self) -> list[Element]:
        """A table's body rows (``<tr>`` elements under ``<tbody>``)."""
        return [tr for body in self.find_all("tbody") for tr in body.find_all("tr")]

    def cells(self) -> list[str]:
        """A row's cells' text."""
        return [c.text for c in self.children if isinstance(c, Element) and c.tag in ("td", "th")]


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        e = Element(tag, dict(attrs))
        self.stack[-1].children.append(e)
        if tag not in VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_html(text: str) -> Element:
    """The document's root element."""
    b = _Builder()
    b.feed(text)
    b.close()
    return b.root
