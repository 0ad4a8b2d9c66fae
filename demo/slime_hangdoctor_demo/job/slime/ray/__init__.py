"""slime.ray (slime-hangdoctor demo stand-in)."""
