"""``status``: its values, the analysis of what was read, the reading itself and the problem rules."""
