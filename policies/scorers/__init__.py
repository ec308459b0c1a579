"""kvroute policies.scorers package."""
