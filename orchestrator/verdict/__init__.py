"""Facts -> findings: checks, expectations, topology classes, fleet-wide judging and drift."""
