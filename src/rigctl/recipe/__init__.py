"""Recipes: the model (model.py), where they live (catalog.py), loading with overlays (load.py)."""
