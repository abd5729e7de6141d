"""What people and machines read: terminal tables, the HTML report, Prometheus/JUnit/CSV outputs."""
