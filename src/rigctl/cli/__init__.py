"""The command line: thin typer commands over the core, and the one renderer for text and JSON.

Command modules import only light things at module level; the core is imported inside each command so
that `rigctl --help` and `rigctl recipes` start fast."""
