"""What kind of failure a finding's message reports: the key that tells distinct findings
apart (runner, shrinking, expectations, campaigns and diffs all count findings by it)."""

from __future__ import annotations

import re


def signature(message: str) -> str:
    """What kind of failure ``message`` reports, to tell distinct findings apart: the
    broken rule or property with its operation, else the message up to its details
    (``after free_blocks: free count``)."""
    named = re.search(r"(rule|property) '([a-z0-9-]+)'", message)
    operation = message.split(" ", 1)[0].split("(")[0].strip(":")
    if named and named.group(1) == "property":
        return f"property {named.group(2)}"
    if named:
        kind = f"{operation} rule {named.group(2)}"
        # a free block released, and a held block released more often than held (listed
        # twice in one call, upstream issue 42571), are two different bugs
        held = re.search(r"released (\d+) time\(s\) but held (\d+)", message)
        if held:
            kind += " (a free block)" if held.group(2) == "0" else " (more often than held)"
        return kind
    head = ": ".join(message.split(": ")[:2])
    # ids, counts and block lists vary between two sightings of one finding
    return re.sub(r"'[^']*'|\[[^\]]*\]|-?\d+", "_", head)[:80]
