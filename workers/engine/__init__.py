"""kvroute workers.engine package."""
