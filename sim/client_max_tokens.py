"""What the simulated clients send as ``max_tokens``, apart from how long the answers are.

A trace records each answer's length; a real client sends a cap, or none. The router
estimates decode time, cost and KV room from ``max_tokens``, so a simulation in which every
request's ``max_tokens`` is its recorded answer length tells the router something no live
client does. ``ClientMaxTokens`` says what the clients send instead; the answers the
engines generate stay the recorded ones whatever it says, so every setting replays the same
work and differs only in what the router is told:

* ``exact``: the recorded output length (each client knows its answer's length);
* ``none``: no ``max_tokens`` (vLLM then serves up to the context window);
* a number ``N``: one cap for every request, raised to the recorded length where that is
  longer (a recorded answer of that length means the client's cap allowed it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["exact", "none", "cap"]


@dataclass(frozen=True, slots=True)
class ClientMaxTokens:
    mode: Mode = "exact"
    cap: int = 0            # the tokens of ``cap`` mode

    @classmethod
    def parse(cls, text: str) -> ClientMaxTokens:
        """``exact``, ``none`` or a positive whole number of tokens; ValueError otherwise."""
        value = text.strip().lower()
        if value in ("exact", "none"):
            return cls(mode="exact" if value == "exact" else "none")
        try:
            cap = int(value)
        except ValueError:
            raise ValueError(f"{text!r}: give exact, none or a number of tokens") from None
        if cap <= 0:
            raise ValueError(f"{text!r}: a cap must be at least 1 token")
        return cls(mode="cap", cap=cap)

    def for_output(self, output_tokens: int) -> int | None:
        """The ``max_tokens`` a client sends for an answer of ``output_tokens``."""
        if self.mode == "exact":
            return output_tokens
        if self.mode == "none":
            return None
        return self.cap if self.cap > output_tokens else output_tokens

    def label(self) -> str:
        return str(self.cap) if self.mode == "cap" else self.mode


def window_problem(sent: ClientMaxTokens, window: int) -> str | None:
    """Why a cap cannot be simulated: vLLM refuses (400) a ``max_tokens`` past its whole
    ``max_model_len``, so every request would be refused by every worker."""
    if sent.mode == "cap" and window and sent.cap > window:
        return (f"--client-max-tokens: {sent.cap} is past the largest max_model_len of the "
                f"fleet's workers ({window}): vLLM refuses such a request (400) rather than "
                f"clamp it; give at most {window}")
    return None


EXACT = ClientMaxTokens()      # the default: each request's recorded output length
