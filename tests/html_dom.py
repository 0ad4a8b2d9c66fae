"""A small DOM read from HTML text with the standard library's parser (what a test of the HTML
report asserts on: the page as written, or as Chromium's `--dump-dom` serialises it), and the
checks every report page must pass whatever its input."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    children: list[Element] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # its own text and its descendants', in order

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def text(self) -> str:
        return "".join(self.texts)

    def iter(self) -> list[Element]:
        out = [self]
        for child in self.children:
            out += child.iter()
        return out

    def find_all(self, tag: str | None = None, cls: str | None = None) -> list[Element]:
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
        ]

    def by_id(self, ident: str) -> Element | None:
        return next((e for e in self.iter() if e.attrs.get("id") == ident), None)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(el)
        if tag not in _VOID:
            self.stack.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        for el in self.stack:
            el.texts.append(data)


def parse_dom(text: str) -> Element:
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root


# Elements that load, run or link to something; attributes that do.
ACTIVE_TAGS = frozenset(
    {
        "script", "iframe", "frame", "object", "embed", "img", "image", "link", "a", "use",
        "foreignobject", "audio", "video", "source", "form", "base", "animate", "set",
    }
)  # fmt: skip
LINK_ATTRIBUTES = frozenset({"href", "xlink:href", "src", "srcset", "action", "formaction"})


def inert_problems(root: Element) -> list[str]:
    """What in the page could run, load or link: must be empty for every report."""
    problems = []
    for e in root.iter():
        if e.tag in ACTIVE_TAGS:
            problems.append(f"<{e.tag}> element")
        for name, value in e.attrs.items():
            if name.startswith("on"):
                problems.append(f"<{e.tag} {name}=...>")
            if name in LINK_ATTRIBUTES:
                problems.append(f"<{e.tag} {name}={value!r}>")
            if "url(" in value.lower():
                problems.append(f"<{e.tag} {name}={value!r}>")
    styles = root.find_all("style")
    if len(styles) != 1 or "url(" in styles[0].text or "@import" in styles[0].text:
        problems.append("a style element other than the report's own")
    return problems
