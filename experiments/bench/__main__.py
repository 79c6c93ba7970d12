"""``python -m medmis.experiments.bench``: see the package's docstring."""

from ._main import main

raise SystemExit(main())
