"""`capcon replay`: the console on recorded polls, with the same views and flags the live console built."""

# The replay speeds the keys step through (x2, /2); 1 is the recorded pace. Here so `capcon --help` stays light.
MIN_SPEED = 0.25
MAX_SPEED = 64.0
