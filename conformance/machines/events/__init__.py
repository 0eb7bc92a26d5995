"""The events level: a target's KV event stream judged by a consumer model."""
