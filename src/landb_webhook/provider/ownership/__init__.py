"""The ownership gate (claims) and adopting what a cluster already published."""
