"""ApplyChanges: the applier (the apply ordering in numbered steps), its write machinery (executor, fence),
the removal guard, refusals, the state kept between applies, and the load balancers' tag writes."""
