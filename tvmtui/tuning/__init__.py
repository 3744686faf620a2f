"""Tuning: the worker process, its events, and the MetaSchedule pieces it plugs in."""
