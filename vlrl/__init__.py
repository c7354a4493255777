"""vlrl: large-batch reinforcement learning for vision-language GUI and computer-use agents."""

__version__ = "0.1.0"
