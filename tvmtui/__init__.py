"""tvmtui: an interactive terminal tuning studio for Apache TVM."""

__version__ = "0.1.0"
