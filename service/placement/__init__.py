"""GPU-to-NIC locality audit of a job's rank placement (issue #17): ``audit`` is pure, ``store`` reads."""
