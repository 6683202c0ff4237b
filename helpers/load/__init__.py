"""TODO layout docstring."""
