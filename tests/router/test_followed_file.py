"""FollowedFile: lines go on to the file at its path after a rename or a removal."""

from __future__ import annotations

import os
from pathlib import Path

from router.followed_file import FollowedFile


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_renamed_file_is_followed_within_the_check_interval(tmp_path: Path) -> None:
    path, clock = tmp_path / "dlog.jsonl", Clock()
    followed = FollowedFile(path, check_s=1.0, clock=clock)
    followed.write("one\n")
    followed.flush()
    path.rename(tmp_path / "dlog.1.jsonl")          # logrotate's default, or mv
    clock.now = 0.5
    followed.write("two\n")                          # before the next check: still held
    clock.now = 1.0
    followed.write("three\n")
    followed.close()
    assert (tmp_path / "dlog.1.jsonl").read_text() == "one\ntwo\n"
    assert path.read_text() == "three\n"


def test_a_removed_file_is_made_again(tmp_path: Path) -> None:
    path, clock = tmp_path / "dlog.jsonl", Clock()
    followed = FollowedFile(path, check_s=1.0, clock=clock)
    followed.write("one\n")
    os.remove(path)
    clock.now = 2.0
    followed.write("two\n")
    followed.close()
    assert path.read_text() == "two\n"


def test_the_same_file_and_a_truncated_one_are_kept(tmp_path: Path) -> None:
    path, clock = tmp_path / "dlog.jsonl", Clock()
    followed = FollowedFile(path, check_s=1.0, clock=clock)
    followed.write("one\n")
    followed.flush()
    os.truncate(path, 0)                             # copytruncate
    clock.now = 5.0
    followed.write("two\n")
    followed.close()
    assert path.read_text().endswith("two\n")


def test_a_path_that_cannot_be_reopened_keeps_the_held_file(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    path, clock = folder / "dlog.jsonl", Clock()
    followed = FollowedFile(path, check_s=1.0, clock=clock)
    followed.write("one\n")
    held = followed._stream
    os.remove(path)
    os.rmdir(folder)
    clock.now = 1.0
    followed.write("two\n")                          # nowhere to reopen: the held file
    assert followed._stream is held
    folder.mkdir()
    clock.now = 2.0
    followed.write("three\n")                        # the folder is back: reopened there
    followed.close()
    assert path.read_text() == "three\n"
