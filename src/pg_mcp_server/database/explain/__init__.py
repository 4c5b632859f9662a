"""explain_query.

- `plans`: EXPLAIN behind the same guard, and warnings read from the plan's structure.
- `text`: PostgreSQL's text EXPLAIN format, written from its JSON format.
"""
