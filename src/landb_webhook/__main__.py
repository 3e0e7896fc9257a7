from landb_webhook.cli import main

raise SystemExit(main())
