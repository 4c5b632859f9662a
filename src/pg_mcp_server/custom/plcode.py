"""The statements that run a pl-do or pl-func tool's code, per language (pgEdge's conventions).

A DO block takes no parameters, so a pl-do tool's arguments travel as JSON in the transaction's
`mcp.tool_args` setting (set with a bound parameter, never spliced into code), and its result
comes back through `mcp.tool_result`, read in the same transaction. The code gets `args` (and
`result` in PL/pgSQL, `mcp_return(result)` elsewhere) from a few lines written around it here.
A pl-func tool is a temporary function `pg_temp.mcp_tool_<digest>(args jsonb) RETURNS
<returns>` (the digest of its language, return type and code, so that each tool, and each
version of a tool after a reload, has its own), with `SET search_path FROM CURRENT`: its body
runs on the path set when it is created (custom/resolve.py's PL path), whatever path calls it.

The operator's code is trusted (it is their file), but the statement around it is checked: it
is built with a dollar-quote tag the code does not contain, then parsed with PostgreSQL's own
parser, and refused unless it is exactly the one DO or CREATE FUNCTION statement intended, with
the code, language and function name given (so `returns` or `language` cannot add anything).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pglast
from pglast import ast

FUNCTION = "mcp_tool"  # in pg_temp, with a digest (function_name)
ARGS_SETTING = "mcp.tool_args"
RESULT_SETTING = "mcp.tool_result"
READ_ARGS = f"SELECT pg_catalog.current_setting('{ARGS_SETTING}') AS a"
SET_RESULT = f"SELECT pg_catalog.set_config('{RESULT_SETTING}', $1, true)"

_PLPGSQL_DO = """\
DECLARE
args jsonb := pg_catalog.current_setting('{args}')::jsonb;
result jsonb;
BEGIN
{code}
IF result IS NOT NULL AND pg_catalog.current_setting('{result}', true) = '' THEN
PERFORM pg_catalog.set_config('{result}', result::text, true);
END IF;
END"""

_PYTHON_DO = f"""\
import json as _mcp_json
args = _mcp_json.loads(plpy.execute("{READ_ARGS}")[0]["a"])
def mcp_return(result):
    text = result if isinstance(result, str) else _mcp_json.dumps(result, default=str)
    plpy.execute(plpy.prepare("{SET_RESULT}", ["text"]), [text])
"""

_V8_DO = f"""\
var args = JSON.parse(plv8.execute("{READ_ARGS}")[0].a);
function mcp_return(result) {{
  plv8.execute("{SET_RESULT}", [typeof result === "string" ? result : JSON.stringify(result)]);
}}
"""

_PERL_RETURN = f"""\
sub mcp_return {{
  my ($result) = @_;
  my $text = ref $result ? _mcp_encode($result) : $result;
  spi_exec_prepared(spi_prepare(q{{{SET_RESULT}}}, 'text'), $text);
}}
"""

# JSON::PP is the JSON module every Perl has. encode_json and decode_json as in JSON.pm, but
# on characters, which is what PL/Perl exchanges with PostgreSQL (JSON.pm's work on UTF-8
# bytes, and would garble every non-ASCII character).
_PERLU_ARGS = """\
no warnings 'redefine';
use JSON::PP ();
sub encode_json { JSON::PP->new->canonical->encode($_[0]) }
sub decode_json { JSON::PP->new->decode($_[0]) }
sub _mcp_encode { encode_json($_[0]) }
my $args = decode_json(@SOURCE@);
"""

# Trusted PL/Perl cannot load JSON::PP: arguments come from jsonb_each_text (values as text,
# nested ones as their JSON text) and a hash is returned through json_object.
_PERL_ARGS = """\
no warnings 'redefine';
sub _mcp_encode {
  my ($h) = @_;
  my @k = sort keys %$h;
  my $plan = spi_prepare(q{SELECT pg_catalog.json_object($1, $2)::text AS j}, 'text[]', 'text[]');
  return spi_exec_prepared($plan, \\@k, [map { $h->{$_} } @k])->{rows}[0]{j};
}
my $args = {};
my $plan = spi_prepare(q{SELECT key, value FROM pg_catalog.jsonb_each_text($1::jsonb)}, 'text');
$args->{$_->{key}} = $_->{value} for @{spi_exec_prepared($plan, @SOURCE@)->{rows}};
"""

_PERL_SETTING = f"spi_exec_query(q{{{READ_ARGS}}})->{{rows}}[0]{{a}}"


@dataclass(frozen=True)
class Convention:
    do_prelude: str  # before a pl-do block's code (PL/pgSQL wraps it instead)
    func_param: str  # the jsonb parameter's name
    func_prelude: str  # before a pl-func body


CONVENTIONS = {
    "plpython3u": Convention(_PYTHON_DO, "mcp_args", "import json\nargs = json.loads(mcp_args)\n"),
    "plv8": Convention(_V8_DO, "args", ""),  # plv8 hands jsonb over as an object
    "plperlu": Convention(
        _PERLU_ARGS.replace("@SOURCE@", _PERL_SETTING) + _PERL_RETURN,
        "args",
        _PERLU_ARGS.replace("@SOURCE@", "$_[0]"),
    ),
    "plperl": Convention(
        _PERL_ARGS.replace("@SOURCE@", _PERL_SETTING) + _PERL_RETURN,
        "args",
        _PERL_ARGS.replace("@SOURCE@", "$_[0]"),
    ),
}
# Any other language: `args jsonb` for a function; a DO block reads and sets the two settings.
_PLAIN = Convention("", "args", "")


def _quoted(code: str) -> str:
    """`code` as a dollar-quoted literal, with a tag it does not contain."""
    n = 0
    while f"$mcp{n}" in code:
        n += 1
    return f"$mcp{n}${code}$mcp{n}$"


def _one(sql: str, kind: type[ast.Node]) -> ast.Node:
    try:
        statements = pglast.parse_sql(sql)
    except pglast.parser.ParseError as exc:
        raise ValueError(str(exc)) from None
    if len(statements) != 1 or not isinstance(statements[0].stmt, kind):
        raise ValueError("it does not make one statement")
    stmt: ast.Node = statements[0].stmt
    return stmt


def _options(elements: tuple[ast.DefElem, ...] | None) -> dict[str, object]:
    """A statement's options by name; a name given twice makes it something else."""
    out: dict[str, object] = {}
    for element in elements or ():
        arg, name = element.arg, str(element.defname)
        if name in out:
            raise ValueError(f"it gives {name} twice")
        if isinstance(arg, tuple):
            out[name] = [a.sval for a in arg if isinstance(a, ast.String)]
        else:
            out[name] = arg.sval if isinstance(arg, ast.String) else None
    return out


def do_block(language: str, code: str) -> str:
    """The DO statement running a pl-do tool's code."""
    if language == "plpgsql":
        body = _PLPGSQL_DO.format(args=ARGS_SETTING, result=RESULT_SETTING, code=_terminated(code))
    else:
        body = CONVENTIONS.get(language, _PLAIN).do_prelude + code
    sql = f"DO {_quoted(body)} LANGUAGE {language}"
    stmt = _one(sql, ast.DoStmt)
    assert isinstance(stmt, ast.DoStmt)
    if _options(stmt.args) != {"as": body, "language": language}:
        raise ValueError("the code and language do not make a DO block")
    return sql


def _terminated(code: str) -> str:
    # The code becomes a statement of the wrapping block: it needs its closing semicolon.
    code = code.strip()
    return code if code.endswith(";") else code + ";"


def function_name(language: str, returns: str, code: str) -> str:
    """A pl-func tool's function name (in pg_temp): the same for the same code."""
    digest = hashlib.sha256("\0".join((language, returns, code)).encode()).hexdigest()
    return f"{FUNCTION}_{digest[:16]}"


def create_function(language: str, returns: str, code: str) -> str:
    """The CREATE FUNCTION statement of a pl-func tool."""
    convention = CONVENTIONS.get(language, _PLAIN)
    body = convention.func_prelude + code
    name = function_name(language, returns, code)
    sql = (
        f"CREATE OR REPLACE FUNCTION pg_temp.{name}({convention.func_param} jsonb) "
        f"RETURNS {returns}\n"
        f"LANGUAGE {language} SET search_path FROM CURRENT AS {_quoted(body)}"
    )
    stmt = _one(sql, ast.CreateFunctionStmt)
    assert isinstance(stmt, ast.CreateFunctionStmt)
    names = [n.sval for n in stmt.funcname or () if isinstance(n, ast.String)]
    params = list(stmt.parameters or ())
    setting = next((o.arg for o in stmt.options or () if o.defname == "set"), None)
    if (
        names != ["pg_temp", name]
        or stmt.is_procedure
        or _options(stmt.options) != {"language": language, "set": None, "as": [body]}
        or not isinstance(setting, ast.VariableSetStmt)
        or setting.kind != pglast.enums.VariableSetKind.VAR_SET_CURRENT
        or setting.name != "search_path"
        or not params
        or params[0].name != convention.func_param
        or any(p.mode != pglast.enums.FunctionParameterMode.FUNC_PARAM_TABLE for p in params[1:])
    ):
        raise ValueError("it is not a return type")
    return sql


def returns_set(returns: str) -> bool:
    """Whether `returns` (checked to be a return type, see create_function) gives rows: SETOF
    or TABLE(...). Raises ValueError for anything that is not a return type."""
    stmt = _one(create_function("sql", returns, ""), ast.CreateFunctionStmt)
    assert isinstance(stmt, ast.CreateFunctionStmt)
    table = any(
        p.mode == pglast.enums.FunctionParameterMode.FUNC_PARAM_TABLE for p in stmt.parameters or ()
    )
    return table or bool(stmt.returnType is not None and stmt.returnType.setof)


def call_function(name: str) -> str:
    return f"SELECT * FROM pg_temp.{name}($1::pg_catalog.jsonb)"


def drop_function(name: str) -> str:
    return f"DROP FUNCTION pg_temp.{name}(pg_catalog.jsonb)"


def check_plpgsql(code: str) -> None:
    """Parse a pl-do PL/pgSQL block as it will run (PostgreSQL's PL/pgSQL parser, offline):
    syntax errors and unknown variables fail here, at load. Raises ValueError."""
    body = _PLPGSQL_DO.format(args=ARGS_SETTING, result=RESULT_SETTING, code=_terminated(code))
    sql = f"CREATE FUNCTION pg_temp.{FUNCTION}() RETURNS void LANGUAGE plpgsql AS {_quoted(body)}"
    try:
        pglast.parse_plpgsql(sql)
    except pglast.parser.ParseError as exc:
        raise ValueError(str(exc)) from None
