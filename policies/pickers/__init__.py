"""kvroute policies.pickers package."""
