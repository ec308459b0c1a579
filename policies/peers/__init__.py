"""kvroute policies.peers package."""
