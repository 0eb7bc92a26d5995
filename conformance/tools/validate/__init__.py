"""``kvpool validate``: an engine's request log and its KV-event stream, judged against the
spec's manager replaying the same requests."""
