"""Helpers shared by several test areas (importable as ``tests.support``; pytest puts the repo root on sys.path)."""
