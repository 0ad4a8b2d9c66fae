"""slime.backends.megatron_utils.update_weight (slime-hangdoctor demo stand-in)."""
