"""The package's layering, read from its sources (no import is executed): no import cycles between
its modules, and the offline tools (``nnadapter_tvm.tools``) sit on top of the runtime, never under it.

The modules are those the package installs: ``nnadapter_tvm/`` with ``op_converters/`` and
``targets/`` mapped into it as ``nnadapter_tvm.op_converters`` and ``nnadapter_tvm.targets``
(pyproject's ``package-dir``)."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "nnadapter_tvm"
TOOLS = f"{PACKAGE}.tools"


@dataclasses.dataclass(frozen=True)
class Import:
    """One import statement's target module, where it is written and whether it runs at import."""

    target: str
    line: int
    module_level: bool  # False: inside a function (runs when the function is called)


def _package_dirs() -> dict[str, Path]:
    """Each installed package name -> its source folder, as pyproject's ``package-dir`` maps it (an inline
    table of strings, read with a pattern: tomllib is not in Python 3.10, which the project supports)."""
    text = (ROOT / "pyproject.toml").read_text()
    table = re.search(r"^package-dir\s*=\s*\{([^}]*)\}", text, re.MULTILINE)
    assert table is not None, "pyproject.toml has no package-dir"
    return {name: ROOT / folder for name, folder in re.findall(r'"([^"]+)"\s*=\s*"([^"]+)"', table.group(1))}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (source file, is a package's ``__init__``)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for name, folder in _package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [name, *rel.parts]
            if any(p.startswith(".") or p == "__pycache__" for p in rel.parts):
                continue
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            modules.setdefault(".".join(parts), (path, is_package))
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements and whether each runs when the module is imported (not in a function).
    Imports under ``if TYPE_CHECKING:`` never run and are left out."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, module_level: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, module_level))
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child, module_level)
            return
        inner = module_level and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, True)
    return found


def _known(name: str, modules: dict) -> str | None:
    """``name`` or its longest prefix that is one of the package's modules."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def _imports(module: str, modules: dict) -> list[Import]:
    """The package modules ``module`` imports. ``from X import Y`` counts as importing ``X.Y`` where
    that is a module (a submodule), else ``X``."""
    path, is_package = modules[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if is_package else module.rpartition(".")[0]
    result = []
    for node, module_level in _import_nodes(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                targets.append(full if full in modules else base)
        for target in targets:
            known = _known(target, modules)
            if known is not None and known != module:
                result.append(Import(known, node.lineno, module_level))
    return result


def _graph(module_level_only: bool) -> dict[str, dict[str, int]]:
    """module -> {imported module: line of the first such import}."""
    modules = _modules()
    graph: dict[str, dict[str, int]] = {}
    for module in modules:
        edges: dict[str, int] = {}
        for imp in _imports(module, modules):
            if imp.module_level or not module_level_only:
                edges.setdefault(imp.target, imp.line)
        graph[module] = edges
    return graph


def _components(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, {})))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The import cycles, each a list of modules with the first repeated at the end: for every module
    in a cycle, a shortest cycle through it (the same cycle is listed once)."""
    cycles, seen = [], set()
    for component in _components(graph):
        for start in sorted(component):
            cycle = _shortest_cycle(graph, component, start)
            key = frozenset(itertools.pairwise(cycle))
            if key not in seen:
                seen.add(key)
                cycles.append(cycle)
    return cycles


def _shortest_cycle(graph: dict[str, dict[str, int]], component: set[str], start: str) -> list[str]:
    """A shortest cycle through ``start`` inside its strongly connected ``component`` (breadth-first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in component:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in parents:
                    parents[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" if b is not None else a for a, b in zip(cycle, [*cycle[1:], None]))


def test_module_set_is_the_installed_package():
    """The parse sees the mapped packages under their installed names (else the checks below see nothing)."""
    modules = _modules()
    for name in (
        f"{PACKAGE}.model",
        f"{PACKAGE}.runtime.cache",
        f"{PACKAGE}.tools.cli",
        f"{PACKAGE}.op_converters.conv",
        f"{PACKAGE}.targets.llvm",
        f"{PACKAGE}.frontends.onnx.imported_graph",
    ):
        assert name in modules, name
    graph = _graph(module_level_only=True)
    # ``from pkg import submodule`` is an edge to the submodule, a relative import resolves.
    assert f"{PACKAGE}.frontends.onnx.ops" in graph[f"{PACKAGE}.frontends.onnx.registry"]
    assert f"{PACKAGE}.frontends.onnx.value_info" in graph[f"{PACKAGE}.frontends.onnx.function_bodies"]


def test_every_package_is_listed_for_the_wheel():
    """pyproject.toml lists the packages a wheel holds (``[tool.setuptools] packages``): every folder of
    the package with an ``__init__.py`` is there under its installed name, or a wheel install (the
    board's, a user's ``pip install .``) lacks it while an editable install still finds it."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setup["packages"])
    found = {name for name, (path, is_package) in _modules().items() if is_package}
    assert {f"{PACKAGE}.operations", f"{PACKAGE}.session", f"{PACKAGE}.frontends.onnx.ops"} <= found
    assert found == listed, f"not listed: {sorted(found - listed)}; listed, not found: {sorted(listed - found)}"


def test_cycle_finder_reports_a_cycle():
    """The checker itself: a planted cycle is found and printed with its import lines."""
    graph = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7, "d": 1}, "d": {}}
    cycles = _cycles(graph)
    assert cycles == [["a", "b", "c", "a"]]
    # Two cycles sharing a module: each is listed.
    assert _cycles({"a": {"b": 1}, "b": {"a": 1, "c": 1}, "c": {"b": 1}}) == [["a", "b", "a"], ["c", "b", "c"]]
    assert _describe(graph, cycles[0]) == "a (line 3) -> b (line 5) -> c (line 7) -> a"
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles():
    """No cycle among the imports that run when a module is imported (TYPE_CHECKING ones excluded)."""
    graph = _graph(module_level_only=True)
    cycles = _cycles(graph)
    assert not cycles, "import cycles:\n  " + "\n  ".join(_describe(graph, c) for c in cycles)


def test_no_deferred_import_closes_a_cycle():
    """An import written inside a function to dodge a cycle is still the cycle: none may close one."""
    graph = _graph(module_level_only=False)
    cycles = _cycles(graph)
    assert not cycles, "import cycles (counting imports inside functions):\n  " + "\n  ".join(
        _describe(graph, c) for c in cycles
    )


def _runtime_and_api_modules() -> list[str]:
    """The runtime's internals (``nnadapter_tvm.runtime.*``) and the API modules at the package's top."""
    modules = _modules()
    top = [m for m, (_, is_package) in modules.items() if m.count(".") == 1 and not is_package]
    runtime = [m for m in modules if m == f"{PACKAGE}.runtime" or m.startswith(f"{PACKAGE}.runtime.")]
    return sorted({*top, *runtime, PACKAGE})


def test_runtime_and_api_do_not_import_tools():
    """Tools sit on top of the runtime, never the reverse (imports inside functions count too)."""
    modules = _modules()
    offending = []
    for module in _runtime_and_api_modules():
        for imp in _imports(module, modules):
            if imp.target == TOOLS or imp.target.startswith(f"{TOOLS}."):
                offending.append(f"{modules[module][0].relative_to(ROOT)}:{imp.line} imports {imp.target}")
    assert not offending, "the runtime or an API module imports the tools:\n  " + "\n  ".join(offending)


# -- the layer order of docs/architecture.md -------------------------------------------------------------

LAYERS_DOC = ROOT / "docs" / "architecture.md"


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the layer table: its layer number, what it is, and its module patterns."""

    layer: int
    part: str
    patterns: tuple[str, ...]

    def holds(self, module: str) -> int:
        """How specifically a pattern of this row names ``module`` (0: none does)."""
        return max((_specificity(p) for p in self.patterns if _matches(p, module)), default=0)


def _specificity(pattern: str) -> int:
    """A module named exactly beats any ``X.*``; a longer ``X.*`` beats a shorter one."""
    return 10_000 if not pattern.endswith(".*") else len(pattern)


def _matches(pattern: str, module: str) -> bool:
    """``X.*``: the package ``X`` and every module in it; otherwise the one module named."""
    if pattern.endswith(".*"):
        return module == pattern[:-2] or module.startswith(pattern[:-1])
    return module == pattern


def _layer_rows(text: str) -> list[Row]:
    """The rows of the table between ``<!-- layers -->`` and ``<!-- /layers -->``."""
    match = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.DOTALL)
    assert match is not None, f"{LAYERS_DOC.name} has no layer table"
    rows = []
    for line in match.group(1).strip().splitlines()[2:]:  # past the header and its rule
        layer, part, modules = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows.append(Row(int(layer), part, tuple(re.findall(r"`([^`]+)`", modules))))
    return rows


def _row_of(module: str, rows: list[Row]) -> list[Row]:
    """The rows that hold ``module`` by its most specific pattern (one, in a sound table)."""
    best = max(row.holds(module) for row in rows)
    return [row for row in rows if best and row.holds(module) == best]


def _layer_violations(graph: dict[str, dict[str, int]], rows: list[Row]) -> list[str]:
    """Each import that points up the table, or across to a peer row of the same layer."""
    found = []
    for module, edges in sorted(graph.items()):
        (source,) = _row_of(module, rows)
        for target, line in sorted(edges.items()):
            (dest,) = _row_of(target, rows)
            if dest is source or dest.layer > source.layer:
                continue
            how = "a peer" if dest.layer == source.layer else "a higher layer"
            found.append(f"{module} (line {line}, {source.part}) imports {target} ({dest.part}): {how}")
    return found


def test_every_module_is_in_one_row_of_the_layer_table():
    rows = _layer_rows(LAYERS_DOC.read_text())
    placed = {module: [r.part for r in _row_of(module, rows)] for module in _modules()}
    unplaced = sorted(m for m, parts in placed.items() if not parts)
    twice = sorted(f"{m}: {parts}" for m, parts in placed.items() if len(parts) > 1)
    assert not unplaced and not twice, f"not in the layer table: {unplaced}; in more than one row: {twice}"
    unused = [p for row in rows for p in row.patterns if not any(_matches(p, m) for m in placed)]
    assert not unused, f"patterns of the layer table that name no module: {unused}"


def test_imports_follow_the_layer_order():
    """Every import (inside functions too) points to the module's own row or a lower layer, never to a
    peer row of the same layer (converters and targets)."""
    rows = _layer_rows(LAYERS_DOC.read_text())
    violations = _layer_violations(_graph(module_level_only=False), rows)
    assert not violations, "imports against docs/architecture.md's layers:\n  " + "\n  ".join(violations)


def test_layer_check_reports_upward_and_peer_imports():
    """The checker itself, on a planted table and graph."""
    table = """<!-- layers -->
| layer | part | modules |
|---|---|---|
| 1 | top | `p.top.*` |
| 2 | left | `p.left` |
| 2 | right | `p.right.*` |
| 3 | base | `p.base`, `p.util` |
<!-- /layers -->"""
    rows = _layer_rows(table)
    assert [r.part for r in _row_of("p.top.cli", rows)] == ["top"] and _row_of("p.topper", rows) == []
    graph = {
        "p.top.cli": {"p.left": 1, "p.base": 2},
        "p.left": {"p.right.x": 3, "p.util": 4},
        "p.right.x": {"p.right": 5},
        "p.right": {},
        "p.base": {"p.top": 6, "p.util": 7},
        "p.util": {},
        "p.top": {},
    }
    assert _layer_violations(graph, rows) == [
        "p.base (line 6, base) imports p.top (top): a higher layer",
        "p.left (line 3, left) imports p.right.x (right): a peer",
    ]


# -- every module in docs/architecture.md's map ----------------------------------------------------------


def _module_sections(text: str) -> dict[str, str]:
    """``## The modules``' sections, each a ``**Title** (`folder/` ...)`` paragraph and what follows it up
    to the next: folder (relative to the repository) -> the section's text."""
    body = text[text.index("## The modules") :]
    body = body[: body.index("\n## ", 1)] if "\n## " in body[1:] else body
    sections: dict[str, str] = {}
    for chunk in re.split(r"\n(?=\*\*)", body)[1:]:
        header = chunk.splitlines()[0]
        folder = re.search(r"`([^`]+/)`", header)
        assert folder is not None, f"a section of the module map names no folder: {header}"
        sections[folder.group(1)] = chunk
    return sections


def _mentioned(section: str) -> set[str]:
    """The module stems a section names in backticks: `stem`, `stem.py`, `folder/stem.py`."""
    return {token.rsplit("/", 1)[-1].removesuffix(".py") for token in re.findall(r"`([^`\n]+)`", section)}


def test_architecture_doc_names_every_module():
    """docs/architecture.md's module map names every module of the package in the section of its folder
    (the deepest folder that has a section), as docs/operators.md names every operation."""
    sections = _module_sections(LAYERS_DOC.read_text())
    missing = []
    for path, is_package in sorted(_modules().values()):
        if is_package:
            continue
        rel = path.relative_to(ROOT).as_posix()
        folder = max((f for f in sections if rel.startswith(f)), key=len, default=None)
        if folder is None or path.stem not in _mentioned(sections[folder]):
            missing.append(f"{rel} (section {folder})")
    assert not missing, "modules docs/architecture.md's map does not name:\n  " + "\n  ".join(missing)


def test_readme_layout_names_every_folder_and_script():
    """The README's layout names every folder of the package and every script in scripts/."""
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    folders = sorted(
        {path.parent.relative_to(ROOT).as_posix() for path, _ in _modules().values() if path.parent != ROOT}
    )
    missing = [f for f in folders if f.rsplit("/", 1)[-1] + "/" not in layout]
    scripts = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh"))
    missing += [f"scripts/{s}" for s in scripts if s not in layout and s.removesuffix(".py") not in layout]
    assert not missing, "the README's layout does not name: " + ", ".join(missing)


MAX_LINES = 600


SOURCE_FOLDERS = ("nnadapter_tvm", "op_converters", "targets", "tests", "scripts")


def test_no_source_file_needs_scrolling_through_several_topics():
    """Every Python file of the package, the tests and the scripts holds at most ``MAX_LINES`` lines: a
    longer one is split by topic."""
    files = [p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    long = sorted(
        f"{path.relative_to(ROOT)}: {n} lines"
        for path in files
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert len(files) > 300 and not long, f"files over {MAX_LINES} lines:\n  " + "\n  ".join(long)


TEST_FOLDERS = {"ops", "targets", "runtime", "frontends", "tools", "e2e"}


def test_tests_are_filed_by_the_part_they_test():
    """tests/ mirrors the package: every test file in one of ``TEST_FOLDERS`` (the shared helpers, such
    as oputil.py, stay at the top); a new test goes where its part of the package is."""
    tests = ROOT / "tests"
    top = sorted(p.name for p in tests.glob("test_*.py"))
    folders = {p.parent.relative_to(tests).parts[0] for p in tests.rglob("test_*.py") if p.parent != tests}
    assert not top and folders <= TEST_FOLDERS, f"test files at the top: {top}; other folders: {folders - TEST_FOLDERS}"
