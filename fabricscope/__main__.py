"""``python -m fabricscope``: the same as the ``fabricscope`` command."""

from fabricscope.cli import main

main()
