"""slime (slime-hangdoctor demo stand-in)."""
