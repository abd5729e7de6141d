"""The run API: the plan of a run (inventory x playbook x probes x expectations), executing and judging it."""
