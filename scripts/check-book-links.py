#!/usr/bin/env python3
"""Check the built book's internal links: every relative link and image of
every page must name a file of the book, and every #fragment an id or name
in that file. External links (anything with a scheme) are counted, never
fetched: the check runs offline.

    scripts/check-book-links.py [BOOK_DIR]   # default docs/book
    scripts/check-book-links.py --self-test  # the checker finds what it must

Written here rather than taken from mdbook-linkcheck: that crate targets an
older mdbook's backend interface and pulls an HTTP client in; this needs
neither.
"""
from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Pages mdbook generates around the chapters; their links are its own.
SKIP_PAGES = {"print.html", "toc.html", "404.html"}


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and a.get("href") is not None:
            self.links.append(a["href"])
        if tag == "img" and a.get("src") is not None:
            self.links.append(a["src"])


def parse(path: Path, cache: dict[Path, Page]) -> Page:
    if path not in cache:
        p = Page()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = p
    return cache[path]


def check(book: Path) -> tuple[int, int, list[str]]:
    book = book.resolve()
    cache: dict[Path, Page] = {}
    broken: list[str] = []
    internal = external = 0
    pages = sorted(p for p in book.rglob("*.html") if p.name not in SKIP_PAGES)
    for page in pages:
        rel = page.relative_to(book)
        for href in parse(page, cache).links:
            u = urlsplit(href)
            if u.scheme or href.startswith("//"):
                external += 1
                continue
            internal += 1
            target = page if not u.path else (page.parent / unquote(u.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if book not in target.parents and target != book:
                broken.append(f"{rel}: {href}: leaves the book")
                continue
            if not target.is_file():
                broken.append(f"{rel}: {href}: no such file")
                continue
            if u.fragment and target.suffix == ".html":
                if unquote(u.fragment) not in parse(target, cache).ids:
                    broken.append(f"{rel}: {href}: no anchor #{u.fragment} in {target.relative_to(book)}")
    return internal, external, broken


def self_test() -> int:
    """A small book with one link of each kind: the good ones must pass and
    each bad one be reported, or the check of the real book proves nothing."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "img").mkdir()
        (root / "img" / "a.png").write_bytes(b"png")
        (root / "index.html").write_text(
            '<h1 id="top">t</h1><a href="ch.html#sec">ok</a><a href="#top">ok</a>'
            '<img src="img/a.png"><a href="https://example.com/x">ext</a>'
            '<a href="ch.html#gone">bad anchor</a><a href="missing.html">bad file</a>'
            '<img src="img/b.png"><a href="../outside.html">outside</a>'
        )
        (root / "ch.html").write_text('<h2 id="sec">s</h2><a href="index.html#top">ok</a>')
        internal, external, broken = check(root)
    want = ["#gone", "missing.html", "img/b.png", "../outside.html"]
    ok = internal == 8 and external == 1 and len(broken) == len(want) and all(
        any(w in b for b in broken) for w in want
    )
    print(f"check-book-links: self-test {'ok' if ok else 'FAILED'}: {internal} internal, "
          f"{external} external, broken: {broken}")
    return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    book = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/book")
    if not (book / "index.html").is_file():
        print(f"check-book-links: {book} holds no built book (run mdbook build docs)", file=sys.stderr)
        return 2
    internal, external, broken = check(book)
    for b in broken:
        print(f"check-book-links: {b}", file=sys.stderr)
    print(f"check-book-links: {internal} internal links checked, {len(broken)} broken; "
          f"{external} external links not fetched")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
