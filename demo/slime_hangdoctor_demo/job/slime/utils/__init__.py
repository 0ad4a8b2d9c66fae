"""slime.utils (slime-hangdoctor demo stand-in)."""
