"""kvroute policies.producers package."""
