"""The pure domain core: LanDB alias names, the index rule, the packing rule and the per-server plan.

No I/O and no logging here: every function takes values and returns values, so the rules can be
tested exhaustively (tests/property) and read in one sitting.

- ``names``    -- alias names and tokens: ``app.cern.ch`` <-> ``app`` <-> ``app--load-3-``.
- ``metadata`` -- reading ``landb-alias*`` keys of one server, including forms we must never edit.
- ``indices``  -- THE INDEX RULE: which N each carrier of an alias gets.
- ``packing``  -- THE PACKING RULE: how tokens are laid out over ``landb-alias``, ``landb-alias2``, ...
- ``plan``     -- from wanted carriers per alias to per-server metadata writes in two phases,
                  make and break (THE APPLY ORDERING that sends them is provider/apply/applier.py).
"""
