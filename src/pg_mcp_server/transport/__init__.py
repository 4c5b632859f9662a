"""How messages reach the server: stdio (`stdio.py`, with `envelope.py` and `idscan.py` for
what the SDK would drop or answer badly) and Streamable HTTP (`gateway.py` around the SDK's
app, `workers.py` for the processes and the listening socket). None of them knows a tool."""
