"""Running probes on hosts: the probe payload, the runner, the bundle, envelopes and outcomes."""
