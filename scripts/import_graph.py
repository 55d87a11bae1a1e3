"""Print the import graph between specviz modules, its cycles, and the imports not at a module's top level.

    python scripts/import_graph.py            # summary: counts, cycles, modules over 450 lines
    python scripts/import_graph.py --edges    # also every edge (module-level and function-level)

Reads the source with `ast` only (nothing is imported), so it runs on any checkout.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = "specviz"
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(mod: str, is_pkg: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The specviz modules one import statement names (relative imports resolved)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == PKG]
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != PKG:
        return []
    # `from . import x` may name a submodule x
    return [f"{target}.{a.name}" for a in node.names] + [target]


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]], list[tuple[str, int, str]], dict[str, int]]:
    files = {module_name(p): p for p in sorted((ROOT / PKG).rglob("*.py"))}
    top: dict[str, set[str]] = {m: set() for m in files}
    inner: dict[str, set[str]] = {m: set() for m in files}
    local: list[tuple[str, int, str]] = []
    lines = {}
    for mod, path in files.items():
        text = path.read_text()
        lines[mod] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            names = [n for n in resolve(mod, path.name == "__init__.py", node) if n in files and n != mod]
            # keep the most specific name: `from .x import y` is an edge to x.y only if x.y is a module
            names = [n for n in names if not any(o.startswith(n + ".") for o in names)] or names
            (inner if node.col_offset > 0 else top)[mod].update(names)
            if node.col_offset > 0:
                local.append((mod, node.lineno, ast.unparse(node)))
    return top, inner, local, lines


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    top, inner, local, lines = graph()
    both = {m: top[m] | inner[m] for m in top}
    print(f"modules: {len(top)}")
    print(f"module-level edges: {sum(map(len, top.values()))}; function-level edges: {sum(map(len, inner.values()))}")
    print(f"import statements not at a module's top level: {len(local)}")
    for name, g in (("module-level", top), ("all (module + function level)", both)):
        cyc = cycles(g)
        print(f"cycles, {name}: {len(cyc)}")
        for c in cyc:
            print("   ", " <-> ".join(c))
    big = sorted(((n, m) for m, n in lines.items() if n > MAX_LINES), reverse=True)
    print(f"modules over {MAX_LINES} lines: " + (", ".join(f"{m} ({n})" for n, m in big) or "none"))
    if "--edges" in argv:
        for m in sorted(top):
            for t in sorted(top[m]):
                print(f"  {m} -> {t}")
            for t in sorted(inner[m] - top[m]):
                print(f"  {m} -> {t}   (in a function)")
    if "--local" in argv:
        for mod, line, src in local:
            print(f"  {mod}:{line}: {src}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
