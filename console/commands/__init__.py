"""One module per `capcon` verb."""
