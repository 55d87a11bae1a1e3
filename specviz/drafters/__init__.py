"""Drafters: each proposes a draft tree for the target to verify."""
