"""Correlation engine: attribute slow training steps to a layer and a component (see engine.py)."""

from fabricscope.service.correlate.engine import attribute_step, job_report, list_steps, process_pending

__all__ = ["attribute_step", "job_report", "list_steps", "process_pending"]
