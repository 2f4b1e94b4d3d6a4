"""Tests of the scrape source, the watcher and `capcon watch --once`."""
