"""kvroute bench package."""
