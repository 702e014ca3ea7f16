"""Maintainer tools (not shipped): regenerate the golden directories, write the docs, probe a GPU box."""
