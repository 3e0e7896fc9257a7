"""``status``: its values, the analysis of what was read (one server's holdings kept value by value), the
reading itself and the problem rules."""
