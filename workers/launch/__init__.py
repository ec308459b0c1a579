"""Starting real vLLM servers for the real workers of a fleet (``kvroute launch-vllm``).

``settings`` reads a worker's ``launch:`` block, ``command`` turns it and the worker's GPU
profile into the ``vllm`` argv and environment, ``process`` starts, health-checks and stops
the servers by pid, ``cli`` is the sub-command.
"""
