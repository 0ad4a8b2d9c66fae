"""The demo user's own code, plugged into slime by path (as a slime user's project folder)."""
