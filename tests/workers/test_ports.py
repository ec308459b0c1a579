"""Port picking outside the kernel's ephemeral range, checked by real binds on loopback."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from workers.ports import (
    LOWEST_PORT,
    bindable,
    ephemeral_range,
    free_port,
    free_ports,
    nth_port,
    ports_outside,
)


def test_ephemeral_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    path = tmp_path / "range"
    path.write_text("32768\t60999\n")
    assert ephemeral_range(path) == (32768, 60999)
    path.write_text("garbage")
    assert ephemeral_range(path) is None
    assert ephemeral_range(tmp_path / "missing") is None


def test_ports_outside_the_range_skip_it_and_the_low_ports() -> None:
    spans = ports_outside((32768, 60999))
    assert spans == [range(LOWEST_PORT, 32768), range(61000, 65536)]
    assert ports_outside((1024, 65535)) == []
    assert ports_outside(None) == []
    assert nth_port(spans, 0) == LOWEST_PORT
    assert nth_port(spans, len(spans[0])) == 61000
    with pytest.raises(IndexError):
        nth_port(spans, sum(len(s) for s in spans))


def test_free_port_is_outside_the_ephemeral_range_and_bindable() -> None:
    ephemeral = (32768, 60999)
    ports = {free_port(ephemeral=ephemeral, chooser=random.Random(seed)) for seed in range(20)}
    assert len(ports) == 20
    assert not any(32768 <= port <= 60999 for port in ports)
    assert all(port >= LOWEST_PORT and bindable("127.0.0.1", port) for port in ports)


def test_a_taken_port_is_not_handed_out() -> None:
    ephemeral = (32768, 60999)
    first = free_port(ephemeral=ephemeral, chooser=random.Random(7))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", first))
        holder.listen()
        assert not bindable("127.0.0.1", first)
        again = free_port(ephemeral=ephemeral, chooser=random.Random(7))   # same first pick
    assert again != first


def test_ports_for_one_fleet_are_distinct_even_when_drawn_alike() -> None:
    """Two workers of a benchmark's fleet were given one port (each drawn alone, at random)
    and the fleet file was refused."""
    drawn = iter([20_001, 20_001, 20_002, 20_001, 20_003])
    assert free_ports(3, draw=lambda host: next(drawn)) == [20_001, 20_002, 20_003]
    ports = free_ports(8)
    assert len(set(ports)) == 8 and all(bindable("127.0.0.1", p) for p in ports)


def test_no_room_outside_the_range_falls_back_to_the_kernel() -> None:
    port = free_port(ephemeral=(LOWEST_PORT, 65535))
    assert 0 < port <= 65535 and bindable("127.0.0.1", port)
