"""``kvpool conform`` in three parts: :mod:`.plan` (what will run), :mod:`.run` (running a
plan) and :mod:`.report` (what it found), joined by :mod:`.command`."""
