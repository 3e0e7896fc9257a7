from landb_simulator.cli import main

raise SystemExit(main())
