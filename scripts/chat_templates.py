#!/usr/bin/env python3
"""Renders every chat template in ../shared/data/chat-templates (plus the project's own
python-compat probe template) for a fixed set of sample conversations, the way Hugging Face
transformers renders them, and writes the expected outputs as a committed test fixture:

    crates/pocket-models/tests/data/chat_templates/expected.json

Renderer: transformers' own `render_jinja_template` (transformers==5.17.0, jinja2 3.1.x, no torch
needed), so the environment is exactly transformers' ImmutableSandboxedEnvironment (trim_blocks,
lstrip_blocks, loopcontrols, its tojson, raise_exception, strftime_now). `strftime_now` is made
deterministic by pinning transformers' `datetime.now()` to FIXED_NOW; the Rust test pins the same.

Setup (once):  python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install transformers==5.17.0 jinja2
Run:           /tmp/tfenv/bin/python scripts/chat_templates.py
"""

import datetime as _dt
import json
import pathlib
import sys

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEMPLATES = ROOT.parent / "shared" / "data" / "chat-templates"
LOCAL = ROOT / "crates" / "pocket-models" / "tests" / "data" / "chat_templates"
OUT = LOCAL / "expected.json"

FIXED_NOW = _dt.datetime(2026, 2, 3, 4, 5, 6)


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


chat_template_utils.datetime = _FixedDatetime

BOS = "<|bos|>"
EOS = "<|eos|>"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}},
}

CONVERSATIONS = {
    "system_user": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is 2+2?"},
        ]
    },
    "user_only_unicode": {
        "messages": [{"role": "user", "content": "Hello! Ünïcödé ✓ 🦙 \"quotes\" and 'apostrophes'\n\ttabbed"}]
    },
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Tell me a joke."},
        ]
    },
    "assistant_prefill": {
        "messages": [
            {"role": "user", "content": "Write a haiku about autumn."},
            {"role": "assistant", "content": "Autumn moonlight"},
        ]
    },
    "thinking_history": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"},
            {"role": "user", "content": "And 3+3?"},
        ]
    },
    "reasoning_content": {
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
            {"role": "user", "content": "And 3+3?"},
        ]
    },
    "tools_available": {
        "messages": [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "What's the weather in Paris?"},
        ],
        "tools": [WEATHER_TOOL],
    },
    "tool_call_roundtrip": {
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 22, \"sky\": \"clear\"}"},
            {"role": "assistant", "content": "It is 22°C and clear in Paris."},
        ],
        "tools": [WEATHER_TOOL],
    },
    "thinking_disabled": {
        "messages": [{"role": "user", "content": "Hi there"}],
        "extra": {"enable_thinking": False},
    },
    "empty": {"messages": []},
    "probe": {
        "messages": [
            {"role": "user", "content": "  Hello world?  "},
            {"role": "skip", "content": "ignored"},
            {"role": "assistant", "content": "Hi! How are you?"},
        ],
        "tools": [WEATHER_TOOL],
        "only": ["python-compat.jinja"],
    },
    "probe2": {
        "messages": [
            {"role": "user", "content": "hello world, hello"},
            {"role": "assistant", "content": "Hi"},
            {"role": "user", "content": "Bye"},
        ],
        "only": ["python-compat-2.jinja"],
    },
}


def render(template, conv, add_generation_prompt):
    kwargs = dict(conv.get("extra", {}))
    kwargs["bos_token"] = BOS
    kwargs["eos_token"] = EOS
    try:
        out, _ = chat_template_utils.render_jinja_template(
            conversations=[conv["messages"]],
            tools=conv.get("tools"),
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return {"output": out[0]}
    except jinja2.exceptions.TemplateSyntaxError as e:  # also unknown filters at compile time
        return {"error": "syntax", "message": str(e)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises a bare TemplateError; other errors are subclasses
        kind = "raised" if type(e) is jinja2.exceptions.TemplateError else "render"
        return {"error": kind, "message": str(e)}
    except Exception as e:  # noqa: BLE001 - record what Python did, whatever it was
        return {"error": "render", "message": f"{type(e).__name__}: {e}"}


def main():
    probes = [LOCAL / "python-compat.jinja", LOCAL / "python-compat-2.jinja"]
    # the chat templates inside the GGUFs the model store fetches, extracted as they are
    from_gguf = sorted(LOCAL.glob("gguf-*.jinja"))
    files = sorted(TEMPLATES.glob("*.jinja")) + from_gguf + probes
    if not files[: -len(probes)]:
        sys.exit(f"no templates in {TEMPLATES}")
    cases = []
    for path in files:
        template = path.read_text()
        for name, conv in CONVERSATIONS.items():
            only = conv.get("only")
            if only is not None and path.name not in only:
                continue
            if only is None and path in probes:
                continue
            for agp in (False, True):
                case = {
                    "template": path.name,
                    "conversation": name,
                    "add_generation_prompt": agp,
                    "messages": conv["messages"],
                    "tools": conv.get("tools"),
                    "extra": conv.get("extra", {}),
                    "bos_token": BOS,
                    "eos_token": EOS,
                }
                case.update(render(template, conv, agp))
                cases.append(case)
    meta = {
        "generator": "scripts/chat_templates.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "fixed_now": FIXED_NOW.isoformat(),
    }
    OUT.write_text(json.dumps({"meta": meta, "cases": cases}, indent=1, ensure_ascii=False) + "\n")
    ok = sum(1 for c in cases if "output" in c)
    print(f"wrote {OUT.relative_to(ROOT)}: {len(cases)} cases, {ok} rendered, {len(cases) - ok} errors")


if __name__ == "__main__":
    main()
