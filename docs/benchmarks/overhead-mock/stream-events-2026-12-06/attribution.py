"""The checks each event of a chat stream now goes through, alone, on one token event of
the mock (CPU time, best of 5): the error hint's search, and the end-of-stream check with
the one end mark of before and the two of now. Run as ``micro.py`` is."""

import time
import timeit

from micro import chunks

out = chunks(512)[5]
lines1 = (b"\ndata: [DONE]",)
lines2 = (b"\ndata: [DONE]", b"\ndata:[DONE]")
marks1 = (b"data: [DONE]",)
marks2 = (b"data: [DONE]", b"data:[DONE]")
for stmt in ("b'\"error\"' in out",
             "out.startswith(marks1) or any(line in out for line in lines1)",
             "out.startswith(marks2) or any(line in out for line in lines2)"):
    best = min(timeit.repeat(stmt, globals=globals(), number=300_000, repeat=5,
                             timer=time.process_time)) / 300_000
    print(f"{best * 1e9:6.0f} ns  {stmt}")
