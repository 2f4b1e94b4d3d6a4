"""capcon."""
