"""``sudo python -m tests.lab run|up|down``: the fabric lab (test equipment, not shipped in the wheel)."""

from tests.lab.cli import lab_app

lab_app()
