"""What is there now, read and judged: the servers' aliases (inventory), node health, departed servers,
the TXT registry's records."""
