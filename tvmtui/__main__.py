from tvmtui.cli import main

raise SystemExit(main())
