"""slime.backends (slime-hangdoctor demo stand-in)."""
