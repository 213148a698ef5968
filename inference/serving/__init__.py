"""Turns validated API requests into engine work and engine events into API responses."""
