"""The code map holds (ARCHITECTURE.md): each part of `database/` is reached through its face
(its `__init__`), the face names only what exists, and `database/` never imports upwards."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
DATABASE = SRC / "pg_mcp_server" / "database"
PARTS = sorted(p.name for p in DATABASE.iterdir() if (p / "__init__.py").exists())
UPWARDS = ("tools", "primitives", "custom", "server", "transport", "app", "middleware")


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted((SRC / "pg_mcp_server").rglob("*.py")):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out.append((name.removesuffix(".__init__"), ast.parse(path.read_text())))
    return out


def _face(part: str) -> set[str]:
    """The names a part's face declares: what its `if TYPE_CHECKING:` block imports."""
    tree = ast.parse((DATABASE / part / "__init__.py").read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                names.update(a.asname or a.name for a in stmt.names)
    return names


def test_every_part_is_imported_through_its_face() -> None:
    faces = {f"pg_mcp_server.database.{p}": _face(p) for p in PARTS}
    wrong: list[str] = []
    for module, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            target = node.module.split(".")
            if target[:2] != ["pg_mcp_server", "database"] or len(target) < 3:
                continue
            part = ".".join(target[:3])
            if module == part or module.startswith(part + "."):
                continue  # inside a part, modules import each other directly
            if len(target) > 3:
                wrong.append(f"{module} imports {node.module} (use {part})")
            for alias in node.names:
                if alias.name not in faces[part]:
                    wrong.append(f"{module} imports {alias.name}, not in {part}'s face")
    assert not wrong, "\n".join(wrong)


def test_each_face_names_what_exists_and_loads_it() -> None:
    for part in PARTS:
        package = importlib.import_module(f"pg_mcp_server.database.{part}")
        for name in _face(part):
            assert getattr(package, name) is not None, f"{part}.{name}"


def test_the_database_layer_never_imports_upwards() -> None:
    wrong = []
    for module, tree in _modules():
        if not module.startswith("pg_mcp_server.database"):
            continue
        for node in ast.walk(tree):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                parts = name.split(".")
                if parts[0] == "pg_mcp_server" and len(parts) > 1 and parts[1] in UPWARDS:
                    wrong.append(f"{module} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_folder_holds_more_than_ten_modules() -> None:
    crowded = {
        str(folder.relative_to(SRC)): n
        for folder in [SRC / "pg_mcp_server", *(SRC / "pg_mcp_server").rglob("*/")]
        if folder.is_dir() and folder.name != "__pycache__"
        if (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"])) > 10
    }
    # the top level holds the entry and process modules (ARCHITECTURE.md, "Entry and process")
    crowded.pop("pg_mcp_server", None)
    assert not crowded, crowded


def test_a_long_module_says_why_it_is_long() -> None:
    """A module over ~400 lines says in its docstring why it is one module ("Its size ...")."""
    unexplained = []
    for path in sorted((SRC / "pg_mcp_server").rglob("*.py")):
        text = path.read_text()
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > 400 and "Its size" not in docstring:
            unexplained.append(str(path.relative_to(SRC)))
    assert unexplained == [], unexplained
