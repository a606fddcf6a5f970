#!/usr/bin/env python3
"""The layering of the crates, checked from their source.

1. No import cycle between files of the runtime (runtime/src), the host (bins/host/src) or
   mcp-load (loadtest/src). File A depends on file B when A names an item of B: a `use` of
   it (grouped, multi-line, `pub use` included) or a path to it in code (`crate::a::b::f()`,
   `super::x`). A `mod b;` declaration is not a dependency. Test code is left out: files
   declared under `#[cfg(test)]` and inline `#[cfg(test)] mod … { }` blocks may reach anywhere.
2. `proto` (the sans-IO core) names none of `actor`, `auth`, `http`, `pipeline`, `tools`, `ledger`,
   `stores`, `stats`, `server`.

Exit status 0 when both hold, 1 otherwise (each cycle is printed with the line that makes
each of its edges). `--report` prints the same and exits 0; `--modules` prints which
top-level module of the runtime depends on which; `--self-test` checks the parser.
"""

import os
import re
import sys
import tempfile

CRATES = ["runtime/src", "bins/host/src", "loadtest/src"]
PROTO_MAY_NOT = {"actor", "auth", "http", "pipeline", "tools", "ledger", "stores", "stats", "server"}


def strip(src):
    """Source without comments, string and char literals (kept line for line)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and not re.match(r"\w", src[i - 1:i] or " "):
            hashes = re.match(r"r(#*)\"", src[i:]).group(1)
            j = src.find('"' + hashes, i + len(hashes) + 2)
            j = n if j < 0 else j + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4] + "    "):
            j = src.find("'", i + 2 if src[i + 1] == "\\" else i + 1)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_test_blocks(code):
    """`#[cfg(test)] mod x { … }` blocks blanked (newlines kept)."""
    for m in list(re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", code))[::-1]:
        depth, j = 0, m.end() - 1
        while j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            if depth == 0:
                break
            j += 1
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), j + 1) + code[j + 1:]
    return code


def modules(root):
    """{module path tuple: file} for the crate at root, following `mod` declarations."""
    found = {}

    def visit(path, file, child_dir):
        found[path] = file
        code = strip(open(file, encoding="utf-8").read())
        for m in re.finditer(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            attrs, name = m.group(1), m.group(2)
            if "cfg(test)" in attrs:
                continue
            custom = re.search(r'#\[path\s*=\s*"([^"]+)"\]', attrs)
            candidates = [os.path.join(child_dir, name + ".rs"), os.path.join(child_dir, name, "mod.rs")]
            if custom:
                candidates = [os.path.join(os.path.dirname(file), custom.group(1))]
            target = next((c for c in candidates if os.path.exists(c)), None)
            if target is None:
                continue
            visit(path + (name,), target, os.path.join(child_dir, name))

    top = next(os.path.join(root, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(root, f)))
    visit((), top, root)
    if os.path.exists(os.path.join(root, "main.rs")) and os.path.exists(os.path.join(root, "lib.rs")):
        visit((), os.path.join(root, "lib.rs"), root)
    return found


def uses(code):
    """(line, path tuple) of every path this code names through `use`, `crate::` or `super::`."""
    out = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        line = code.count("\n", 0, m.start()) + 1
        tree = re.sub(r"\s+as\s+\w+", "", m.group(1))
        for p in expand(re.sub(r"\s+", "", tree)):
            out.append((line, p))
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", code):
        # `use` lines were read above; a path in code counts as well.
        out.append((code.count("\n", 0, m.start()) + 1, tuple(m.group(1).split("::"))))
    return out


def expand(tree):
    """`a::{b,c::{d,e}}` -> [(a,b), (a,c,d), (a,c,e)]."""
    if "{" not in tree:
        return [tuple(tree.split("::"))]
    head, rest = tree.split("{", 1)
    inner, depth, part, parts = rest[:-1], 0, "", []
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        part += ch
    parts.append(part)
    prefix = tuple(x for x in head.split("::") if x)
    return [prefix + p for part in parts if part for p in expand(part)]


def resolve(path, here, mods):
    """The module (tuple) a path names, or None when it is outside the crate."""
    if not path:
        return None
    if path[0] == "crate":
        base, rest = (), path[1:]
    elif path[0] in ("super", "self"):
        base, rest = here, path
        while rest and rest[0] in ("super", "self"):
            base = base[:-1] if rest[0] == "super" else base
            rest = rest[1:]
    elif (path[0],) in mods and here == ():
        base, rest = (), path  # a top-level module named from the crate root
    else:
        return None
    best = base if base in mods else None
    for k in range(1, len(rest) + 1):
        if base + rest[:k] in mods:
            best = base + rest[:k]
    return best


def graph(root):
    mods = modules(root)
    edges = {}
    for mod, file in mods.items():
        code = without_test_blocks(strip(open(file, encoding="utf-8").read()))
        for line, path in uses(code):
            target = resolve(path, mod, mods)
            if target is not None and target != mod and target[:len(mod)] != mod:
                edges.setdefault(mod, {}).setdefault(target, (file, line))
    return mods, edges


def cycles(nodes, edges):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                strong(w)
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

    for v in nodes:
        if v not in index:
            strong(v)
    return out


def name(m):
    return "::".join(m) or "(crate root)"


def check(roots, report):
    bad = 0
    for root in roots:
        mods, edges = graph(root)
        for comp in cycles(list(mods), edges):
            bad += 1
            print(f"{root}: import cycle between {len(comp)} files:")
            members = set(comp)
            for a in comp:
                for b, (file, line) in sorted(edges.get(a, {}).items()):
                    if b in members:
                        print(f"  {name(a)} -> {name(b)}   ({file}:{line})")
        if root == "runtime/src":
            for a, targets in sorted(edges.items()):
                if a[:1] == ("proto",):
                    for b, (file, line) in sorted(targets.items()):
                        if b[:1] and b[0] in PROTO_MAY_NOT:
                            bad += 1
                            print(f"proto names {name(b)}: {file}:{line}")
    if bad == 0:
        print("check-layers: no import cycle between files; proto names no shell module")
    return 0 if bad == 0 or report else 1


def module_edges(root):
    _, edges = graph(root)
    top = {}
    for a, targets in edges.items():
        for b in targets:
            if a[:1] != b[:1] and a and b:
                top.setdefault(a[0], set()).add(b[0])
    for a in sorted(top):
        print(f"{a} -> {', '.join(sorted(top[a]))}")


def self_test():
    files = {
        "lib.rs": "pub mod a;\nmod b;\n#[cfg(test)]\nmod t;\nmod c;\n",
        "a.rs": "use crate::b::{\n    X,\n    Y,\n};\npub fn f() {}\n",
        "b.rs": "pub struct X; pub struct Y;\nfn g() { super::a::f(); }\n// crate::c::h\nconst S: &str = \"crate::c::h\";\n",
        "t.rs": "use crate::a::f;\n",
        "c.rs": "pub mod d;\n#[cfg(test)]\nmod tests { use crate::a::f; }\n",
        "c/d.rs": "pub fn h() { crate::a::f() }\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for f, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, f)), exist_ok=True)
            open(os.path.join(d, f), "w").write(text)
        mods, edges = graph(d)
        assert set(mods) == {(), ("a",), ("b",), ("c",), ("c", "d")}, mods  # t.rs: test only
        assert set(edges.get(("a",), {})) == {("b",)}, edges  # a multi-line group
        assert set(edges.get(("b",), {})) == {("a",)}, edges  # super:: in code; not the comment or string
        assert ("c",) not in edges, edges  # the inline test module does not count
        assert set(edges.get(("c", "d"), {})) == {("a",)}, edges  # c.rs + c/d.rs layout
        assert cycles(list(mods), edges) == [[("a",), ("b",)]], cycles(list(mods), edges)
    print("check-layers: self-test passed")
    return 0


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    if "--self-test" in sys.argv:
        sys.exit(self_test())
    if "--modules" in sys.argv:
        module_edges("runtime/src")
        sys.exit(0)
    sys.exit(check(CRATES, "--report" in sys.argv))
