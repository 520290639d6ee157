"""InfiniBand fabric sweep from a management host with an HCA: ibnetdiscover → links, perfquery → counters."""
