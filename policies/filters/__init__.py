"""kvroute policies.filters package."""
