"""router/form_fields.py: the text fields of a multipart form, files never read."""

from __future__ import annotations

import pytest

from router.form_fields import MAX_FIELD_BYTES, MAX_PARTS_SCANNED, boundary_of, form_fields


def form(*parts: tuple[str, str, bytes], boundary: str = "xYz") -> bytes:
    out = b""
    for name, extra, value in parts:
        out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"{extra}\r\n"
                f"\r\n").encode() + value + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def test_the_named_text_fields_are_read_and_files_are_not() -> None:
    audio = b"RIFF" + bytes(range(256)) * 64 + b'name="model"\r\n\r\nfake'
    body = form(("file", '; filename="model"\r\nContent-Type: audio/wav', audio),
                ("model", "", "whisper-ß".encode()), ("stream", "", b"true"),
                ("model", "", b"second"))
    assert form_fields(body, "xYz", ("model", "stream")) == {"model": "whisper-ß",
                                                             "stream": "true"}
    assert form_fields(body, "xYz", ("language",)) == {}


@pytest.mark.parametrize("body", [
    b"", b"--xYz", b"--xYz\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nw",
    b"garbage without a delimiter", b"--xYz--\r\n"])
def test_a_malformed_form_gives_what_was_found_and_never_raises(body: bytes) -> None:
    assert form_fields(body, "xYz", ("model",)) == {}


def test_a_long_value_is_not_read_as_a_field() -> None:
    body = form(("model", "", b"m" * (MAX_FIELD_BYTES + 1)), ("stream", "", b"1"))
    assert form_fields(body, "xYz", ("model", "stream")) == {"stream": "1"}


def test_only_the_first_parts_are_scanned() -> None:
    """Every part was scanned: a form of 400,000 one-byte fields, then ``model``, held the
    event loop 3.6 s."""
    filler = [(f"f{i}", "", b"x") for i in range(MAX_PARTS_SCANNED - 1)]
    body = form(*filler, ("model", "", b"m"))
    assert form_fields(body, "xYz", ("model",)) == {"model": "m"}      # the last one scanned
    body = form(*filler, ("other", "", b"o"), ("model", "", b"m"))
    assert form_fields(body, "xYz", ("model",)) == {}


@pytest.mark.parametrize(("content_type", "boundary"), [
    ("multipart/form-data; boundary=abc", "abc"),
    ('Multipart/Form-Data; charset=utf-8; boundary="a b"', "a b"),
    ("application/json", None), ("multipart/form-data", None), ("", None)])
def test_the_boundary_of_a_form_only(content_type: str, boundary: str | None) -> None:
    assert boundary_of(content_type) == boundary
