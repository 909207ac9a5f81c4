#!/usr/bin/env python3
"""Check the workspace's source layout; exit 1 with one line per finding.

1. No Rust source file under crates/ longer than 850 lines.
2. No import circle between the files of one crate: file A uses file B and
   B uses A (directly or through others). Each file is a module, named by
   its path below the crate root (lib.rs, main.rs, src/bin/*.rs); the module
   tree is followed from the roots' `mod` items. Edges come from `crate::`,
   `super::` and `self::` paths (in `use` lines, groups and code), each to
   the file of the longest module path it names; a file's edges into its own
   submodules are structure and left out. Each set of files caught in
   circles is reported once, with its members and one circle through them.
   Test modules (`mod tests`, tests.rs, anything behind `#[cfg(test)]`) are
   not part of the check.
3. No crate's src/ over 10,000 lines of Rust.

scripts/layout-allow.txt names known exceptions, each with a reason:
    <path> <reason ...>                       a file allowed over the limit
    circle <crate dir> <m1,m2,...> <reason>   a known circle among those modules
A listed long file is not a finding. A circle whose modules are all in a
listed set is a finding unless
`--circles-report-only` is given (or STASIS_LAYOUT_CIRCLES_REPORT_ONLY=1):
then it is printed and does not fail the check. Entries that no longer
match anything are printed as notes so the list can be trimmed.
"""

import os
import re
import sys

LIMIT = 850
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOW = os.path.join(REPO, "scripts", "layout-allow.txt")

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)
CFG_TEST = re.compile(r"#\[cfg\((?:[^\]]*\b)?test\b[^\]]*\)\]")


def rel(p):
    return os.path.relpath(p, REPO)


def read_allowlist():
    files, circles, problems = {}, {}, []
    if not os.path.exists(ALLOW):
        return files, circles, problems
    with open(ALLOW, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if parts[0] == "circle":
                if len(parts) < 4:
                    problems.append(f"{rel(ALLOW)}:{n}: circle entry needs <crate dir> <m1,m2,...> <reason>")
                    continue
                key = (parts[1].rstrip("/"), frozenset(parts[2].split(",")))
                circles[key] = " ".join(parts[3:])
            else:
                if len(parts) < 2:
                    problems.append(f"{rel(ALLOW)}:{n}: {parts[0]}: an exception needs a reason")
                    continue
                files[parts[0]] = " ".join(parts[1:])
    return files, circles, problems


def rust_files(root):
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in ("target", ".git"))
        for name in sorted(names):
            if name.endswith(".rs"):
                yield os.path.join(d, name)


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def strip_comments(text):
    """Drop // and /* */ comments (so doc text naming paths is no edge)."""
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for line in text.split("\n"):
        # A `//` inside a string literal (URLs) cuts the line short; the
        # path fragments that matter come before it on real code lines.
        i = line.find("//")
        out.append(line if i < 0 else line[:i])
    return "\n".join(out)


def strip_test_items(text):
    """Remove items behind #[cfg(test)] (inline test modules, test-only uses)."""
    while True:
        m = CFG_TEST.search(text)
        if not m:
            return text
        start, i = m.start(), m.end()
        # The item ends at `;` before any brace, or at its matching `}`.
        depth = 0
        while i < len(text):
            c = text[i]
            if c == ";" and depth == 0:
                i += 1
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    i += 1
                    break
            i += 1
        text = text[:start] + text[i:]


def child_file(parent_file, is_dir_owner, name):
    """Where `mod name;` declared in parent_file lives (None: not found)."""
    base = os.path.dirname(parent_file)
    if not is_dir_owner:
        base = os.path.join(base, os.path.splitext(os.path.basename(parent_file))[0])
    for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None


def module_tree(root_file):
    """{file: module path (list of segments)} reachable from a crate root."""
    files = {root_file: []}
    todo = [(root_file, [], True)]
    while todo:
        f, path, owner = todo.pop()
        with open(f, encoding="utf-8") as fh:
            text = strip_test_items(strip_comments(fh.read()))
        for m in MOD_DECL.finditer(text):
            name = m.group(1)
            if name == "tests":
                continue
            cf = child_file(f, owner, name)
            if cf is None or cf in files or os.path.basename(cf) == "tests.rs":
                continue
            files[cf] = path + [name]
            todo.append((cf, path + [name], os.path.basename(cf) == "mod.rs"))
    return files


def split_group(group):
    """`a::x, b::{y, z}, c` -> ["a::x", "b::{y, z}", "c"] (depth-0 items)."""
    items, depth, cur = [], 0, ""
    for c in group:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        if c == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += c
    items.append(cur)
    return [it.strip() for it in items if it.strip()]


def group_after(text, i):
    """The text of the brace group opening at text[i] == '{'."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return text[i + 1 :]


PATH_TAIL = re.compile(r"\s*::\s*(\{|" + IDENT + ")")


def expand(text, i, prefix, out):
    """Collect the full paths that continue `prefix` at text[i] (after a `::`)."""
    segs = list(prefix)
    while True:
        m = PATH_TAIL.match(text, i)
        if not m:
            out.append(segs)
            return
        if m.group(1) == "{":
            for item in split_group(group_after(text, m.end(1) - 1)):
                sub = re.match(r"(" + IDENT + r")", item)
                if not sub:
                    continue
                if sub.group(1) == "self":
                    out.append(segs)
                    continue
                expand(item, sub.end(), segs + [sub.group(1)], out)
            return
        segs.append(m.group(1))
        i = m.end()


def referenced_paths(text, modpath):
    """Full module-relative paths (from the crate root) a file names through
    `crate::...`, `super::...` and `self::...`."""
    out = []
    for m in re.finditer(r"\bcrate\b(?=\s*::)", text):
        expand(text, m.end(), [], out)
    for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:super\s*::\s*)+)", text):
        ups = m.group(1).count("super")
        if ups > len(modpath):
            continue
        base = modpath[: len(modpath) - ups]
        # The `::` after the last super was consumed: step back onto it.
        expand(text, m.end() - len(m.group(1)) + m.group(1).rfind("super") + 5, base, out)
    for m in re.finditer(r"(?<![A-Za-z0-9_:])self(?=\s*::)", text):
        expand(text, m.end(), list(modpath), out)
    return out


def referenced_roots(text, modpath):
    """First segments (below the crate root) of the paths a file names."""
    return {p[0] for p in referenced_paths(text, modpath) if p}


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def one_cycle(graph, comp):
    """A readable path a -> b -> ... -> a inside a component."""
    members, start = set(comp), comp[0]
    path, seen = [start], {start}

    def dfs(v):
        for w in sorted(graph.get(v, ())):
            if w == start and len(path) > 1:
                return True
            if w in members and w not in seen:
                seen.add(w)
                path.append(w)
                if dfs(w):
                    return True
                path.pop()
        return False

    dfs(start)
    return " -> ".join(path + [start])


def crate_roots(crate):
    src = os.path.join(crate, "src")
    roots = []
    for name in ("lib.rs", "main.rs"):
        p = os.path.join(src, name)
        if os.path.exists(p):
            roots.append(p)
    bindir = os.path.join(src, "bin")
    if os.path.isdir(bindir):
        for name in sorted(os.listdir(bindir)):
            p = os.path.join(bindir, name)
            if name.endswith(".rs"):
                roots.append(p)
            elif os.path.exists(os.path.join(p, "main.rs")):
                roots.append(os.path.join(p, "main.rs"))
    return roots


def check_circles(crate):
    """[(crate dir, root, members, cycle text)] for each circle in a crate.

    The nodes are the crate's files (each a module); a file uses another when
    it names a path into it (`crate::a::b::Item` uses the file of the
    longest module path `a::b` that exists). A file's edges into its own
    submodules are structure, not use, and are left out; every other edge
    counts, between siblings, cousins and up to ancestors alike."""
    found = []
    for root in crate_roots(crate):
        tree = module_tree(root)
        by_path = {tuple(p): f for f, p in tree.items()}
        name = {f: ("::".join(p) if p else "(root)") for f, p in tree.items()}
        graph = {name[f]: set() for f in tree}
        for f, path in tree.items():
            with open(f, encoding="utf-8") as fh:
                text = strip_test_items(strip_comments(fh.read()))
            for ref in referenced_paths(text, path):
                target = None
                for n in range(len(ref), -1, -1):
                    if tuple(ref[:n]) in by_path:
                        target = by_path[tuple(ref[:n])]
                        break
                if target is None or target == f:
                    continue
                tp = tree[target]
                if tp[: len(path)] == path:
                    continue  # its own submodule
                graph[name[f]].add(name[target])
        for comp in cycles(graph):
            found.append((rel(crate), rel(root), comp, one_cycle(graph, comp)))
    return found


CRATE_LIMIT = 10_000


def crate_sizes(crates_dir):
    """[(crate dir, lines of Rust under src/)]."""
    out = []
    for name in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, name, "src")
        if os.path.isdir(src):
            out.append((os.path.join(crates_dir, name), sum(line_count(p) for p in rust_files(src))))
    return out


def main(argv):
    report_only = "--circles-report-only" in argv or os.environ.get(
        "STASIS_LAYOUT_CIRCLES_REPORT_ONLY"
    ) == "1"
    allow_files, allow_circles, findings = read_allowlist()
    notes = []
    crates_dir = os.path.join(REPO, "crates")
    used_files, used_circles = set(), set()
    for path in rust_files(crates_dir):
        n = line_count(path)
        r = rel(path)
        if n > LIMIT:
            if r in allow_files:
                used_files.add(r)
            else:
                findings.append(f"{r}: {n} lines (limit {LIMIT})")
    for crate, n in crate_sizes(crates_dir):
        if n > CRATE_LIMIT:
            findings.append(f"{rel(crate)}/src: {n} lines of Rust (limit {CRATE_LIMIT}): a room to split")
    for name in sorted(os.listdir(crates_dir)):
        crate = os.path.join(crates_dir, name)
        if not os.path.isdir(os.path.join(crate, "src")):
            continue
        for crate_rel, root, comp, text in check_circles(crate):
            key = next(
                (k for k in allow_circles if k[0] == crate_rel and set(comp) <= k[1]), None
            )
            line = f"{root}: import circle among files {', '.join(comp)}: {text}"
            if key is not None:
                used_circles.add(key)
                if report_only:
                    notes.append(f"{line} (allowed: {allow_circles[key]})")
                    continue
            findings.append(line)
    for f in sorted(set(allow_files) - used_files):
        notes.append(f"{rel(ALLOW)}: {f} is no longer over {LIMIT} lines (or gone): drop it")
    for k in sorted(set(allow_circles) - used_circles, key=lambda k: (k[0], sorted(k[1]))):
        notes.append(f"{rel(ALLOW)}: circle {k[0]} {','.join(sorted(k[1]))} no longer found: drop it")
    for n in notes:
        print(f"note: {n}")
    for f in findings:
        print(f)
    if findings:
        return 1
    print(f"layout: ok (files <= {LIMIT} lines or listed, no unlisted import circles)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
