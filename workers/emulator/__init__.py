"""kvroute workers.emulator package."""
