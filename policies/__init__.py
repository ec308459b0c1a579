"""kvroute policies package."""
