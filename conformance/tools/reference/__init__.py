"""The reference pages of the docs site, generated from the spec itself."""
