"""slime.observability (slime-hangdoctor demo stand-in)."""
