"""`python -m refimpl`: the same entry point as the `refimpl` console command."""

from refimpl.cli import main

raise SystemExit(main())
