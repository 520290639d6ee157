"""Collectors for switches that run Linux (the fabric lab's bridges, SONiC/Cumulus-style boxes)."""
