"""Pool against pool: two targets in lockstep, no spec in the loop (``kvpool diff``)."""
