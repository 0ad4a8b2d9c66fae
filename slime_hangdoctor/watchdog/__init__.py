"""watchdog."""
