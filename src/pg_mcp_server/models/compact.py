"""The base of our output models: answers that leave out every field at its default.

A model reads every byte of an answer, and most of a catalog answer is null, false or the
usual value ("NO ACTION", "btree"). Fields of a `Compact` model that carry a default are sent
only when they differ from it (`dump`); the advertised schema gives each default, and says a
field whose default is null is never null (tools/schemas.py), so the answer validates as is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class Compact(BaseModel):
    def dump(self) -> dict[str, Any]:
        """The answer as JSON values, fields at their default left out."""
        return self.model_dump(mode="json", exclude_defaults=True)
