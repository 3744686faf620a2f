"""The `tvmtui` subcommands, by what they hold (parsed in `tvmtui/cli.py`)."""
