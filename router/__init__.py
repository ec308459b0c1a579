"""kvroute router package."""
