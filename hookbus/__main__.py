"""``python -m hookbus``: the ``hookbus`` command (``demo``, ``watch``, ``replay``), for a Python whose
scripts are not on the path. It exits with the command's status, as the console script does."""

import sys

from hookbus._cli._cli import main

if __name__ == "__main__":
    sys.exit(main())
