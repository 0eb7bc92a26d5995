"""Long fuzzing campaigns on every core, sharing what they find (``kvpool fuzz``)."""
