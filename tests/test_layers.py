"""The layer contracts: which part of the code may import which, checked on the import graph.

The graph is grimp's (the library behind import-linter), built from the sources and
including imports inside functions, so a cycle cannot hide behind a deferred import.

- ``svit.lisp`` knows nothing of processes: it imports nothing else of ``svit``.
- ``svit.ports`` are host integrations: they use only the public API.
- The store does not import the agent loop.
- The host sits on top: nothing below it (the store, the loop, processes) imports it.
- No two modules import each other, directly or through others.
- A private module (``_name``) is imported only from inside its parent package, and no
  module imports another module's private name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "svit", ROOT / "lisp", ROOT / "ports"]

# What a host integration may import: the public modules (DESIGN §3, and the leaf modules
# of addresses and paths, values and redaction that hosts call directly).
PUBLIC = {
    "svit", "svit.errors", "svit.paths", "svit.values", "svit.limits", "svit.redact",
    "svit.store", "svit.reasoners", "svit.host",
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # Imports under ``if TYPE_CHECKING:`` are annotations, not run: they are left out.
    return grimp.build_graph(
        "svit", include_external_packages=False, exclude_type_checking_imports=True, cache_dir=None)


def _imports(graph: grimp.ImportGraph, prefix: str) -> list[tuple[str, str, int]]:
    found = []
    for importer in sorted(graph.modules):
        if importer != prefix and not importer.startswith(prefix + "."):
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                found.append((importer, imported, detail["line_number"]))
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_lisp_imports_nothing_of_the_runtime(graph: grimp.ImportGraph) -> None:
    crossing = [edge for edge in _imports(graph, "svit.lisp") if not _inside(edge[1], "svit.lisp")]
    assert crossing == []


def test_ports_use_only_the_public_api(graph: grimp.ImportGraph) -> None:
    crossing = [
        edge for edge in _imports(graph, "svit.ports")
        if not _inside(edge[1], "svit.ports") and edge[1] not in PUBLIC
    ]
    assert crossing == []


def test_the_store_does_not_import_the_loop(graph: grimp.ImportGraph) -> None:
    crossing = [edge for edge in _imports(graph, "svit.store") if _inside(edge[1], "svit.loop")]
    assert crossing == []


def test_nothing_below_the_host_imports_it(graph: grimp.ImportGraph) -> None:
    below = [module for module in graph.modules if _inside(module, "svit") and not _inside(module, "svit.host")]
    crossing = [
        (module, imported) for module in below
        for imported in graph.find_modules_directly_imported_by(module) if _inside(imported, "svit.host")
    ]
    assert crossing == []


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges.get(child, []))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert _cycles({"a": ["b"], "b": []}) == []


def test_no_module_imports_itself_through_others(graph: grimp.ImportGraph) -> None:
    edges = {
        m: sorted(i for i in graph.find_modules_directly_imported_by(m))
        for m in graph.modules
    }
    assert _cycles(edges) == []


def test_private_modules_are_imported_only_inside_their_package(graph: grimp.ImportGraph) -> None:
    crossing = []
    for importer, imported, line in _imports(graph, "svit"):
        parts = imported.split(".")
        for depth, part in enumerate(parts):
            if part.startswith("_") and not part.startswith("__"):
                parent = ".".join(parts[:depth])
                if not _inside(importer, parent):
                    crossing.append((importer, imported, line))
                break
    assert crossing == []


def _module_name(path: Path) -> str:
    base = {"svit": "svit", "lisp": "svit.lisp", "ports": "svit.ports"}
    relative = path.relative_to(ROOT)
    parts = [base[relative.parts[0]], *relative.parts[1:]]
    parts[-1] = parts[-1].removesuffix(".py")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(p for p in ".".join(parts).split(".") if p)


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_name_imports(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.extend(
                f"{path.relative_to(root)}:{node.lineno} imports {alias.name}"
                for alias in node.names if _private(alias.name) and not _module_file(node, path, alias.name)
            )
    return found


def _module_file(node: ast.ImportFrom, path: Path, name: str) -> bool:
    """``from . import _name``: the name is a private module of the importer's own package."""
    if node.level == 0:
        return False
    package = path.parent
    for _ in range(node.level - 1):
        package = package.parent
    for part in (node.module or "").split("."):
        if part:
            package = package / part
    if package != path.parent:
        return False
    return any((package / f"{name}{suffix}").exists() for suffix in (".py", ""))


def test_no_module_imports_a_private_name_of_another() -> None:
    found = []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            found.extend(_private_name_imports(path))
    assert found == []


def test_the_private_name_check_sees_one(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from svit.process import _hidden\nfrom . import _sibling_module\n", encoding="utf-8")
    assert _private_name_imports(probe, tmp_path) == ["probe.py:1 imports _hidden", "probe.py:2 imports _sibling_module"]


def _declared_names(path: Path) -> list[str] | None:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "__all__":
            return list(ast.literal_eval(node.value)) if node.value is not None else None
    return None


def test_every_module_lists_its_public_names() -> None:
    import importlib

    missing, wrong = [], []
    for source in SOURCES:
        for path in sorted(source.rglob("*.py")):
            names = _declared_names(path)
            if names is None:
                missing.append(str(path.relative_to(ROOT)))
                continue
            module = importlib.import_module(_module_name(path))
            wrong.extend(f"{module.__name__}.{name}" for name in names if not hasattr(module, name))
    assert missing == []
    assert wrong == []
