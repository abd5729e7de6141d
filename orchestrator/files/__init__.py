"""Layer 0: file primitives every layer may use (the transport's known_hosts, the store's runs)."""
