"""The results directory on disk: run directories, fleet.json, history, the lock, atomic writes."""
