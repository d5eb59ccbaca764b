"""routing-rl: dynamic routing in neural networks."""

from routing_rl.envs.registration import register_envs

register_envs()
