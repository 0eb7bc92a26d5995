"""The one search every machine and tool draws its test cases with (seeded choices), and the
one shrinker that makes what it finds minimal."""
