"""slime.backends.megatron_utils (slime-hangdoctor demo stand-in)."""
