"""kvroute workers package."""
