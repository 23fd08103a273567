"""The packages depend on each other one way, read from the source.

``ctxhub`` is the library: it knows nothing of the Django project (``config``) or the app
(``sessions``). In the app, services and jobs change records and report what changed
(``sessions.events``); rendering, pushing and queueing happen above them. No module imports
one that imports it back, at module level or inside a function. Imports under
``if TYPE_CHECKING:`` are left out: they never run, so they cannot close a circle at import;
in the engine they count too, so its modules read bottom-up.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("ctxhub", "config", "sessions", "gateway", "transcripts")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {
    _module_name(path): path
    for package in PACKAGES
    for path in sorted((ROOT / package).rglob("*.py"))
    if "migrations" not in path.parts
}


def _runs(tree: ast.AST, *, types: bool = False) -> Iterator[ast.AST]:
    """Every node that can run, under functions too; what ``if TYPE_CHECKING:`` holds only
    with ``types``."""
    for node in ast.iter_child_nodes(tree):
        checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if checking and not types:
            assert isinstance(node, ast.If)
            for branch in node.orelse:
                yield branch
                yield from _runs(branch)
            continue
        yield node
        yield from _runs(node, types=types)


def _imported(name: str, *, types: bool = False) -> set[str]:
    """The full names a module imports (a name imported from a module counts as that module,
    or as a submodule where there is one)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runs(ast.parse(path.read_text()), types=types):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.update(f"{base}.{alias.name}" for alias in node.names)
            found.add(base)
    return found


def _ours(name: str) -> str | None:
    """The module of ours ``name`` is, or is in (None when it is not ours)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


GRAPH = {
    name: {m for m in map(_ours, _imported(name)) if m is not None and m != name}
    for name in MODULES
}


ENGINE = {
    name: {
        m
        for m in map(_ours, _imported(name, types=True))
        if m is not None and m != name and m.startswith("ctxhub.governance.")
    }
    for name in MODULES
    if name.startswith("ctxhub.governance.")
}
"""The engine's modules, type-only imports included (the package's ``__init__`` left out: it
gathers the public names from all of them)."""


def _circle(graph: dict[str, set[str]] = GRAPH) -> list[str] | None:
    """One import circle, as the modules around it, or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        path.append(name)
        for target in sorted(graph[name]):
            if (circle := visit(target)) is not None:
                return circle
        path.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        if (circle := visit(name)) is not None:
            return circle
    return None


def test_the_graph_is_read_from_every_module() -> None:
    assert {"ctxhub.client", "config.settings", "sessions.services.log", "sessions.tasks"} <= set(
        MODULES
    )
    # Function-level imports count: the app's receivers are imported in its ready().
    assert {"sessions.live", "sessions.tasks"} <= GRAPH["sessions.apps"]


def test_no_engine_module_imports_one_that_imports_it_back_even_for_types() -> None:
    assert _circle(ENGINE) is None, " -> ".join(_circle(ENGINE) or [])


def test_no_module_imports_one_that_imports_it_back() -> None:
    circle = _circle()
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def _reaches(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        for target in GRAPH[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith("ctxhub")))
def test_the_library_knows_nothing_of_the_hub(name: str) -> None:
    assert not {m for m in GRAPH[name] if not m.startswith("ctxhub")}
    assert not {m.split(".")[0] for m in _imported(name)} & {"django", "celery", "channels"}


ABOVE_SERVICES = (
    "sessions.live",
    "sessions.tasks",
    "sessions.views",
    "sessions.controls",
    "sessions.api",
    "sessions.chat",
    "sessions.consumers",
    "config",
)


@pytest.mark.parametrize(
    "name", sorted(n for n in MODULES if n.startswith(("sessions.services", "sessions.jobs")))
)
def test_services_and_jobs_never_render_push_or_queue(name: str) -> None:
    above = {m for m in _reaches(name) if m.startswith(ABOVE_SERVICES)}
    assert not above, f"{name} reaches {sorted(above)}"
    assert not {i for i in _imported(name) if i.startswith(("django.template", "celery"))}
