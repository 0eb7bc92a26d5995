"""The lockstep engine: the machines that drive a spec and a target side by side, compare
what they show, and shrink and report what differs."""
