"""Records and AdjustEndpoints: what the provider answers external-dns' reads with."""
