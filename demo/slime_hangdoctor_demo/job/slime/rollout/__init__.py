"""slime.rollout (slime-hangdoctor demo stand-in)."""
