"""The database layer, in eight parts (ARCHITECTURE.md): `pool`, `guard`, `sql`, `rows`,
`explain`, `catalog`, `vectors`, `health`. Each part's `__init__` is its face: the names the
rest of the server imports from it. Modules inside a part import each other directly."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def face(
    package: str, exports: Mapping[str, Sequence[str]], modules: Sequence[str] = ()
) -> Callable[[str], Any]:
    """A package's `__getattr__` (PEP 562) for the names its modules export (`exports`:
    module -> names) and the `modules` the rest uses as namespaces, importing a module on
    first use: the server answers `initialize` before SQLAlchemy or pglast are imported, and
    `pool.connect` must not load the pool."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
