#!/usr/bin/env python3
"""Bounded loopback load on a running pocket-server: C concurrent streaming /v1/completions
clients, each sending R requests one after another; reports aggregate completion tokens/s and
time to first token (first non-empty text chunk). Standard library only.

  python3 scripts/bench-server.py --url http://127.0.0.1:8080/v1 --clients 1 8 32 --max-tokens 64
"""
import argparse, json, os, statistics, threading, time, urllib.request

KEY = os.environ.get("POCKET_API_KEY")


def one(url, model, prompt, max_tokens, seed):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0.8, "seed": seed, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(url + "/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", **({"Authorization": "Bearer " + KEY} if KEY else {})})
    t0 = time.perf_counter()
    ttft, tokens = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if "error" in c:
                raise RuntimeError(c)
            if c["choices"] and c["choices"][0]["text"] and ttft is None:
                ttft = time.perf_counter() - t0
            if c.get("usage"):
                tokens = c["usage"]["completion_tokens"]
    return ttft, tokens


def run(url, model, clients, per_client, max_tokens):
    ttfts, toks, errors = [], [], []
    lock = threading.Lock()

    def worker(i):
        for j in range(per_client):
            try:
                t, n = one(url, model, f"Story {i}.{j}: Once upon a time, in a small village,",
                           max_tokens, i * 1000 + j)
                with lock:
                    ttfts.append(t); toks.append(n)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(e))

    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in th: t.start()
    for t in th: t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(x for x in ttfts if x is not None)
    p = lambda q: ttfts[min(len(ttfts) - 1, int(q * len(ttfts)))] if ttfts else float("nan")
    print(f"| {clients} | {len(toks)} | {sum(toks)} | {wall:.1f} | {sum(toks) / wall:.1f} | "
          f"{statistics.median(ttfts):.3f} | {p(0.9):.3f} | {len(errors)} |", flush=True)
    for e in errors[:3]:
        print("  error:", e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()
    one(a.url, a.model, "Warm up", 4, 0)
    print("| clients | requests | completion tokens | wall s | aggregate tok/s | TTFT p50 s | TTFT p90 s | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for c in a.clients:
        run(a.url, a.model, c, a.requests_per_client, a.max_tokens)


if __name__ == "__main__":
    main()
