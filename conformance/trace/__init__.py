"""Counterexample traces: the shrunk action sequence of a failure as an ITF JSON file,
replayable against any target, renderable as a table, and emitted as a pytest file."""
