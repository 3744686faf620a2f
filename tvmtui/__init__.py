"""tvmtui: an interactive terminal tuning studio for Apache TVM."""

__version__ = "0.2.0"  # the one place it is set (pyproject.toml reads it); see CHANGELOG.md
