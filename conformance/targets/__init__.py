"""The targets that ship: ``impl``, ``spec``, and any vLLM-style pool (``module:factory``)."""
