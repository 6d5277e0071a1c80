"""``python -m shopping_companion.cli`` = ``shopcomp`` (for environments without the console script)."""

from shopping_companion.cli.root import main

main()
