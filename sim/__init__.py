"""kvroute sim package."""
