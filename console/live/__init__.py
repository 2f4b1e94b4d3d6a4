"""The live path: a fleet polled, each poll turned into a view and a history record.

`watcher` (source -> figures, as an immutable Poll), `feed` (a poll -> a view and a record),
`loop` (the one chained poll loop the console, `capcon record` and `watch --once` drive),
`setup` (the fleets a command's options and plans name), `defaults`.
"""
