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
    held = followed._fd
    os.remove(path)
    os.rmdir(folder)
    clock.now = 1.0
    followed.write("two\n")                          # nowhere to reopen: the held file
    assert followed._fd == held
    folder.mkdir()
    clock.now = 2.0
    followed.write("three\n")                        # the folder is back: reopened there
    followed.close()
    assert path.read_text() == "three\n"


_FILL_THEN_RECOVER = """
import json, resource, sys
from router.followed_file import FollowedFile

path = sys.argv[1]
one, two = FollowedFile(path), FollowedFile(path)      # two processes appending to one file
for i in range(5):
    (one if i % 2 else two).write(json.dumps({"n": i, "pad": "x" * 80}) + "\\n")
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
size = len(open(path, "rb").read())
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 40, hard))     # the disk fills up
failures = 0
for i in range(5, 9):
    try:
        one.write(json.dumps({"n": i, "pad": "y" * 80}) + "\\n")
    except OSError:
        failures += 1
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))          # room again
for i in range(9, 15):
    (two if i % 2 else one).write(json.dumps({"n": i, "pad": "z" * 80}) + "\\n")
print(failures)
"""


def test_a_full_disk_tears_at_most_the_line_it_cut(tmp_path: Path) -> None:
    """With two processes appending, a buffered stream wrote what a full disk had refused
    later, after the other's lines: torn lines, three in 36, long after the disk had room.
    Now the line the disk cut is ended by the next line written, and every line after it
    is whole."""
    import json
    import subprocess
    import sys

    path = tmp_path / "dlog.jsonl"
    done = subprocess.run([sys.executable, "-c", _FILL_THEN_RECOVER, str(path)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 4                       # every write refused while full
    lines = path.read_text().split("\n")
    assert lines[-1] == ""                             # ends with a whole line
    parsed = []
    for line in lines[:-1]:
        try:
            parsed.append(json.loads(line)["n"])
        except ValueError:
            parsed.append(None)
    # the cut line is lost, with the line the other process appended right after it
    assert parsed == [0, 1, 2, 3, 4, None, *range(10, 15)]


def test_a_closed_file_refuses_writes_and_closes_once(tmp_path: Path) -> None:
    """Its descriptor number, closed, could name another file opened since."""
    import pytest

    followed = FollowedFile(tmp_path / "dlog.jsonl")
    followed.close()
    followed.close()
    with pytest.raises(ValueError, match="written after close"):
        followed.write("x\n")
