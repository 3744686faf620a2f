"""The bottom layer every package may import: the event contract a worker writes and every
reader replays (`events`), the state derived from it (`tally`), where files are kept
(`paths`), the user-facing error (`errors`) and small statistics (`stats`). It imports
nothing else of tvmtui."""
