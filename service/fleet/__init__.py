"""The fleet ledger (#48): GPU-hours lost per component across jobs, repair alerts, run comparison."""
