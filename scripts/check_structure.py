#!/usr/bin/env python3
"""Structure guard rails: no module cycles inside a crate, no non-test source file over 800
lines, no non-test function over 100 lines (comments included). Prints what it finds; exits 1 if anything is over the line.

A module's edges are the `crate::a::b` paths it names (in `use` lines or in code) and its
`super::` paths, resolved to the crate's module files. A child module reaching items of its
own parent is structure, not a cycle, and is left out; one reaching a sibling
(`use super::sibling::Item`) is an edge. Glob imports of a parent (`use super::*`) are refused
outside test modules: they would hide the sibling edges.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 800
# Lines of a function, comments and blank lines included (clippy's too_many_lines counts code
# lines only).
MAX_FUNCTION_LINES = 100


def modules(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    found = {}
    for path in src.rglob("*.rs"):
        rel = path.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("lib", "main"):
            parts = parts[:-1]
        elif parts[-1] == "mod":
            parts = parts[:-1]
        found[tuple(parts)] = path
    return found


def resolve(name_path, mods):
    """The longest module prefix of a path of names."""
    for end in range(len(name_path), 0, -1):
        if tuple(name_path[:end]) in mods:
            return tuple(name_path[:end])
    return None


def code_lines(text):
    """The file without its `#[cfg(test)] mod ... { }` block at the end (tests may reach anywhere)."""
    cut = re.search(r"^#\[cfg\(test\)\]\s*\nmod \w+\s*\{", text, flags=re.M)
    return text[: cut.start()] if cut else text


def function_lengths(text):
    """(name, first line, lines) of every function in `text`, found by matching braces (string
    and character literals and line comments are blanked first)."""
    lines = text.split("\n")
    found = []
    for start, line in enumerate(lines):
        match = re.match(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)", line)
        if not match:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[end])
            code = re.sub(r"'(?:\\.|[^'\\])'", "''", code).split("//")[0]
            if not opened and ";" in code and "{" not in code:
                break
            for char in code:
                if char == "{":
                    depth, opened = depth + 1, True
                elif char == "}":
                    depth -= 1
            if opened and depth == 0:
                found.append((match.group(1), start + 1, end - start + 1))
                break
    return found


def test_modules(mods):
    """Modules declared `#[cfg(test)] mod name;` by their parent (test code may import freely)."""
    found = set()
    for module, path in mods.items():
        for match in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod (\w+);", path.read_text()):
            found.add(module + (match.group(1),))
    return found


def edges(mods):
    graph = {module: set() for module in mods}
    for module, path in mods.items():
        text = code_lines(path.read_text())
        for match in re.finditer(r"\bcrate((?:::\w+)+)", text):
            target = resolve(match.group(1).split("::")[1:], mods)
            if target is not None and target != module and module[: len(target)] != target:
                graph[module].add(target)
        for match in re.finditer(r"\b((?:super::)+)(\w+)", text):
            ups = match.group(1).count("super::")
            base = module[: len(module) - ups]
            target = resolve(list(base) + [match.group(2)], mods) or base
            if target != module and module[: len(target)] != target:
                graph[module].add(target)
    return graph


def cycles(graph):
    found, state, stack = [], {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return found


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    failed = False
    for src in sorted(root.glob("crates/*/src")):
        mods = modules(src)
        for module, path in sorted(mods.items()):
            lines = len(code_lines(path.read_text()).splitlines())
            if lines > MAX_FILE_LINES and not path.name.endswith("_tests.rs"):
                print(f"{path.relative_to(root)}: {lines} lines (most {MAX_FILE_LINES})")
                failed = True
        tests = test_modules(mods)
        for module, path in sorted(mods.items()):
            if module in tests:
                continue
            for name, line, count in function_lengths(code_lines(path.read_text())):
                if count > MAX_FUNCTION_LINES:
                    print(f"{path.relative_to(root)}:{line}: fn {name} is {count} lines (most {MAX_FUNCTION_LINES})")
                    failed = True
        for module, path in sorted(mods.items()):
            if module in tests:
                continue
            if re.search(r"^\s*use super::\*;", code_lines(path.read_text()), flags=re.M):
                print(f"{path.relative_to(root)}: `use super::*` outside a test module (import explicitly)")
                failed = True
        for cycle in cycles(edges(mods)):
            names = " -> ".join("::".join(module) or "crate" for module in cycle)
            print(f"{src.parent.name}: module cycle {names}")
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
