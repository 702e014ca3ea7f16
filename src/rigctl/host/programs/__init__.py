"""Programs rigctl runs elsewhere (in an image, under another Python): their text, never imported."""
