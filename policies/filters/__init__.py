"""Filter plugins: drop the workers that cannot serve a request (``context-length``,
``healthy``, ``labels`` / ``pool``, ``model``)."""
