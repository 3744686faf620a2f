"""Importing TVM with what tvmtui's graphs need registered: the tensor intrinsics and the
custom schedule rules that the rewritten blocks of `graph/` name (`schedule_rule`). Tuning,
export and bench all compile through it, so a record replays the same way in each."""
