"""The command line: thin typer commands over the core, and the one renderer for text and JSON.

``commands`` is the table of every command (its module and its line in the root help): ``app.main``
imports only the module of the command being run, and ``roothelp`` writes the root help from the table
without loading typer. A command module imports what its commands use at its top, except a command's
core where that loads the heavy libraries (pydantic and the recipe models, PyYAML, httpx, jinja2, NVML):
the module is loaded for the command's --help, its usage errors and every Tab of shell completion too,
so such an import stays inside the command, with a comment (``benchmarks/cli_imports.py`` prints what
each costs)."""
