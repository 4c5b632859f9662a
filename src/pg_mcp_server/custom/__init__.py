"""Custom definitions: prompts, resources and tools from a YAML file (pgEdge's format).

yamlfile.py reads the file with line numbers, loader.py validates it into the specs of
specs.py, plcode.py writes the SQL that runs procedural-language code, resolve.py qualifies
each statement so that no planted object can take a name of it over, runner.py runs
definitions against the database and checks them there at start, build.py turns them into
the same tool, resource, template and prompt values as the built-ins, and reload.py loads,
checks and swaps them (at start, on SIGHUP, when the file changes).
"""
