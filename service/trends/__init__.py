"""Trends across jobs: hourly rollups of collectives and steps, trend series and annotations (#19)."""
