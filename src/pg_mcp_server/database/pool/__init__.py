"""The connection pool.

- `connect`: the one place a connection is opened (timeouts and SSL refusals said plainly).
- `audit`: the start-up audit of the server's role (privileged roles refused).
- `engine`: the pool and the ways a tool uses a connection: one explicit read-only
  transaction with the guard's locks sent with BEGIN, the session reset after use.
- `errors`: driver, pool and network failures translated to ours (`translate`).
"""
