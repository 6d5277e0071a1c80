"""``python -m shopping_companion.cli`` = ``shopcomp`` (for environments without the console script)."""

from shopping_companion.cli.main import main

main()
