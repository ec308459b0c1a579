"""Producer plugins: what a request carries before the decision (tokens, block hashes,
expected output length, chat rendering, media), and ``runner``, which runs them inline or
off the event loop."""
