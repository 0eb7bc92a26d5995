"""``kvpool crosshair``: CrossHair over the spec's PEP 316 contracts."""
