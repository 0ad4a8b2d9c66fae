"""slime.backends.sglang_utils (slime-hangdoctor demo stand-in)."""
