"""routing-rl: dynamic routing in neural networks."""
