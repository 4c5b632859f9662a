import json
from pathlib import Path
from typing import Any

from pgbed import with_database

ADMIN = Path(__file__).with_name(".dsn").read_text()
DSN = with_database(ADMIN, "atkdb")
def as_role(role: str) -> str:
    return DSN.replace("postgres@", f"{role}@", 1)

async def tool(client: Any, name: str, **args: Any) -> tuple[bool, Any]:
    r = await client.call_tool(name, args)
    txt = r.content[0].text if r.content else ""
    try:
        body = json.loads(txt)
    except Exception:
        body = txt
    return (not r.is_error), body
