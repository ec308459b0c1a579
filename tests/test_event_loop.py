"""The async tests run on uvloop, the loop ``kvroute serve``, ``up`` and the emulator serve
on (tests/conftest.py): code tested on asyncio's loop alone had taken its transport classes
and its clock's resolution for granted."""

from __future__ import annotations

import asyncio


async def test_async_tests_run_on_uvloop() -> None:
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.split(".")[0] == "uvloop", type(loop)
