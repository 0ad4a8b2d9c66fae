"""slime-hangdoctor: why did a slime RL training job stop making progress."""

__version__ = "0.1.0"
