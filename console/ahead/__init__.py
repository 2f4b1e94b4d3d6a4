"""Looking ahead: the arrivals a fleet can expect in the next minutes, and when they pass its capacity.

Pure like the core (console.fleet, console.plan): every function takes `now` and the samples as
arguments; nothing here reads a clock, a file or the network.
"""
