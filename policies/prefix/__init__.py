"""Prefix-cache knowledge of the router: which blocks each worker probably or surely holds."""
