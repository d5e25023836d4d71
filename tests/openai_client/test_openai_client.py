"""Drives a running pocket-server with the official `openai` Python package.

Environment:
  POCKET_BASE_URL  e.g. http://127.0.0.1:8080/v1 (required)
  POCKET_API_KEY   the server's key (required: the suite also checks that a wrong key gets 401)
  POCKET_MODEL     model id to use (default: the first of /v1/models)
  POCKET_CTX       the model's context length in tokens (default: from /v1/models)

Run: python -m unittest discover -s tests/openai_client -v
The assertions hold for any backend (the fake test backend or a real model).
"""

import json
import os
import unittest
import urllib.error
import urllib.request

import openai

BASE = os.environ["POCKET_BASE_URL"]
KEY = os.environ["POCKET_API_KEY"]


def raw_post(path, body, headers):
    """POSTs raw bytes with the standard library; returns (status, parsed JSON)."""
    req = urllib.request.Request(BASE + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def client(key=KEY):
    return openai.OpenAI(base_url=BASE, api_key=key, max_retries=0, timeout=120)


C = client()
MODELS = C.models.list().data
MODEL = os.environ.get("POCKET_MODEL") or MODELS[0].id
CTX = int(os.environ.get("POCKET_CTX") or next(
    (getattr(m, "context_length", None) for m in MODELS if m.id == MODEL), None) or 2048)
MSGS = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Name three colors."},
]


class Chat(unittest.TestCase):
    def test_models(self):
        ids = [m.id for m in C.models.list().data]
        self.assertIn(MODEL, ids)
        self.assertEqual(C.models.retrieve(MODEL).id, MODEL)

    def test_chat(self):
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=8)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL)
        self.assertTrue(r.system_fingerprint)
        self.assertGreater(r.created, 1_600_000_000)
        self.assertEqual(len(r.choices), 1)
        ch = r.choices[0]
        self.assertEqual(ch.message.role, "assistant")
        self.assertIsInstance(ch.message.content, str)
        self.assertIn(ch.finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertGreaterEqual(r.usage.completion_tokens, 1)
        self.assertLessEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_content_parts_and_roles(self):
        r = C.chat.completions.create(model=MODEL, max_completion_tokens=3, messages=[
            {"role": "developer", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Again"},
        ])
        self.assertLessEqual(r.usage.completion_tokens, 3)

    def test_max_tokens_gives_length(self):
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2, temperature=0)
        if r.choices[0].finish_reason == "length":
            self.assertEqual(r.usage.completion_tokens, 2)
        else:
            self.assertLessEqual(r.usage.completion_tokens, 2)

    def test_stream(self):
        chunks = list(C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6,
                                                 temperature=0, stream=True))
        self.assertGreaterEqual(len(chunks), 2)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertTrue(all(c.id == chunks[0].id for c in chunks))
        self.assertTrue(all(c.object == "chat.completion.chunk" for c in chunks))
        self.assertIn(chunks[-1].choices[0].finish_reason, ("stop", "length"))
        for c in chunks[:-1]:
            self.assertIsNone(c.choices[0].finish_reason)
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, temperature=0)
        self.assertEqual(text, r.choices[0].message.content, "greedy stream == greedy non-stream")

    def test_stream_usage(self):
        chunks = list(C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4,
                                                 stream=True, stream_options={"include_usage": True}))
        last = chunks[-1]
        self.assertEqual(last.choices, [])
        self.assertGreater(last.usage.prompt_tokens, 0)
        self.assertGreaterEqual(last.usage.completion_tokens, 1)
        self.assertLessEqual(last.usage.completion_tokens, 4)
        for c in chunks[:-1]:
            self.assertIsNone(c.usage)

    def test_stream_context_manager_close(self):
        # Closing a stream early must not break the server for later requests.
        with C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=64, stream=True) as s:
            for _ in s:
                break
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2)
        self.assertEqual(len(r.choices), 1)

    def test_n2(self):
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=6, n=2, seed=3,
                                      temperature=1.0)
        self.assertEqual([c.index for c in r.choices], [0, 1])
        self.assertGreaterEqual(r.usage.completion_tokens, 2)
        self.assertLessEqual(r.usage.completion_tokens, 12)
        for c in r.choices:
            self.assertIn(c.finish_reason, ("stop", "length"))

    def test_n2_stream(self):
        seen = {}
        for c in C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4, n=2, stream=True):
            for ch in c.choices:
                seen.setdefault(ch.index, []).append(ch)
        self.assertEqual(sorted(seen), [0, 1])
        for chs in seen.values():
            self.assertEqual(chs[0].delta.role, "assistant")
            self.assertIsNotNone(chs[-1].finish_reason)

    def test_seed_reproducible(self):
        kw = dict(model=MODEL, messages=MSGS, max_tokens=8, temperature=1.0, seed=1234)
        a = C.chat.completions.create(**kw).choices[0].message.content
        b = C.chat.completions.create(**kw).choices[0].message.content
        self.assertEqual(a, b)

    def test_stop_string(self):
        base = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0)
        text = base.choices[0].message.content
        if len(text) < 4:
            self.skipTest("model output too short to pick a stop string")
        stop = text[len(text) // 2: len(text) // 2 + 2]
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=12, temperature=0,
                                      stop=[stop, "\u0000never"])
        self.assertEqual(r.choices[0].message.content, text[: text.find(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")
        streamed = "".join(c.choices[0].delta.content or "" for c in C.chat.completions.create(
            model=MODEL, messages=MSGS, max_tokens=12, temperature=0, stop=stop, stream=True)
            if c.choices)
        self.assertEqual(streamed, text[: text.find(stop)])

    def test_logprobs(self):
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=4, temperature=0,
                                      logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertGreaterEqual(len(content), 1)
        if r.choices[0].finish_reason == "length":
            self.assertEqual(len(content), r.usage.completion_tokens)
        for e in content:
            self.assertLessEqual(e.logprob, 0.0)
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertIsInstance(e.bytes, list)
        # Greedy: the chosen token is the most likely one.
        for e in content:
            self.assertAlmostEqual(e.logprob, max(t.logprob for t in e.top_logprobs), places=4)

    def test_sampling_params_accepted(self):
        r = C.chat.completions.create(
            model=MODEL, messages=MSGS, max_tokens=3, temperature=0.7, top_p=0.9,
            presence_penalty=0.5, frequency_penalty=0.5, user="suite",
            extra_body={"top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1})
        self.assertEqual(len(r.choices), 1)


class Completions(unittest.TestCase):
    def test_completion(self):
        r = C.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5)
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(r.object, "text_completion")
        self.assertIsInstance(r.choices[0].text, str)
        self.assertLessEqual(r.usage.completion_tokens, 5)

    def test_prompt_list_and_n(self):
        r = C.completions.create(model=MODEL, prompt=["One", "Two three"], max_tokens=2, n=2)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])

    def test_token_prompt_and_echo(self):
        r = C.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=2, echo=True)
        self.assertEqual(r.usage.prompt_tokens, 3)
        self.assertGreater(len(r.choices[0].text), 0)
        r = C.completions.create(model=MODEL, prompt="Echo me", max_tokens=2, echo=True)
        self.assertTrue(r.choices[0].text.startswith("Echo me"))

    def test_stream_and_logprobs(self):
        chunks = list(C.completions.create(model=MODEL, prompt="Hello", max_tokens=3, stream=True,
                                           stream_options={"include_usage": True}))
        self.assertEqual(chunks[-1].choices, [])
        self.assertLessEqual(chunks[-1].usage.completion_tokens, 3)
        r = C.completions.create(model=MODEL, prompt="Hello", max_tokens=3, logprobs=2)
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), len(lp.token_logprobs))
        self.assertEqual(len(lp.tokens), len(lp.text_offset))
        self.assertTrue(all(len(t) == 2 for t in lp.top_logprobs))


class Errors(unittest.TestCase):
    def check(self, exc, code, fn):
        with self.assertRaises(exc) as cm:
            fn()
        self.assertEqual(cm.exception.status_code, code)
        body = cm.exception.body
        self.assertIsInstance(body, dict)
        self.assertIn("message", body)
        return cm.exception

    def test_wrong_key(self):
        self.check(openai.AuthenticationError, 401,
                   lambda: client("wrong").chat.completions.create(model=MODEL, messages=MSGS))

    def test_missing_key(self):
        status, body = raw_post("/chat/completions",
                                json.dumps({"model": MODEL, "messages": MSGS}).encode(),
                                {"Content-Type": "application/json"})
        self.assertEqual(status, 401)
        self.assertEqual(body["error"]["code"], "invalid_api_key")

    def test_unknown_model(self):
        self.check(openai.NotFoundError, 404,
                   lambda: C.chat.completions.create(model="no-such-model", messages=MSGS))

    def test_out_of_range(self):
        e = self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=MSGS, temperature=5))
        self.assertEqual(e.param, "temperature")
        self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=MSGS, n=0))
        self.check(openai.BadRequestError, 400, lambda: C.completions.create(
            model=MODEL, prompt="x", logprobs=9))

    def test_wrong_type(self):
        e = self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=MSGS, extra_body={"max_tokens": "many"}))
        self.assertEqual(e.param, "max_tokens")

    def test_malformed_json(self):
        status, body = raw_post("/chat/completions", b"{not json",
                                {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["type"], "invalid_request_error")

    def test_prompt_too_long(self):
        e = self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hello " * (CTX + 10)}]))
        self.assertEqual(e.code, "context_length_exceeded")

    def test_unsupported(self):
        e = self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=MSGS,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]))
        self.assertEqual(e.param, "tools")
        e = self.check(openai.BadRequestError, 400, lambda: C.chat.completions.create(
            model=MODEL, messages=MSGS, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}))
        self.assertEqual(e.param, "response_format")

    def test_oversized_body(self):
        self.check(openai.APIStatusError, 413, lambda: C.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * (5 << 20)}]))

    def test_still_serving(self):
        r = C.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=1)
        self.assertEqual(len(r.choices), 1)


if __name__ == "__main__":
    unittest.main()
