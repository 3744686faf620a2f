"""The interactive Textual app."""
