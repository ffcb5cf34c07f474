"""``python -m jaxfp8`` runs the ``jaxfp8`` command."""
import sys

from jaxfp8.tools.cli import main

if __name__ == "__main__":
  sys.exit(main())
