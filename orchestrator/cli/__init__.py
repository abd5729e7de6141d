"""The `probe` command line: argparse in, the run API called, its results presented, exit codes out."""
