from sonnx.cli import main

raise SystemExit(main())
