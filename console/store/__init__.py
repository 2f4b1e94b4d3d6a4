"""The history file: what the console saw, recorded, kept and read back."""
