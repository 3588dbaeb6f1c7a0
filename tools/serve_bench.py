#!/usr/bin/env python3
"""Throughput of an OpenAI-compatible server through HTTP, seen by N concurrent
streaming clients: `headroom serve`, or llama.cpp's llama-server beside it.

    python3 tools/serve_bench.py --base-url http://127.0.0.1:8080 --concurrency 1,4,16
        [--requests 4] [--prompt-tokens 128] [--max-tokens 128] [--endpoint completions|chat]
        [--temperature 0] [--ignore-eos] [--label headroom] [--json-out FILE]

Only the client side: start the server first (same GGUF, same context and
parallel slots for both servers), e.g.
    headroom serve -m model.gguf --parallel 16 --ctx 2048 --device cpu --threads 2
    llama-server -m model.gguf --parallel 16 --ctx-size 32768 --threads 2 --port 8081
(llama-server's --ctx-size is shared by its slots: 16 x 2048 = 32768.)

For each concurrency C, C client threads each send --requests streamed
requests one after the other (stream_options.include_usage on), and the
script reports:
  gen tok/s   generated tokens of all requests / the wall time from the first
              request sent to the last one ended (the server's throughput)
  TTFT        request sent -> first content event, percentiles (ms)
  ITL         gaps between content events after the first (ms); a server
              that sends several tokens an event shows tokens/event > 1
  per-request decode tok/s (tokens after the first / time after the first)
Generated tokens are the usage chunk's completion_tokens, or the count of
content events when the server sends no usage. Each request's prompt starts
with its own number, so no two share a prefix beyond the first few tokens
(--shared-prompt: all the same, to measure prefix caching). Errors (non-200,
a stream without [DONE] or finish_reason) are counted and printed; the
throughput counts completed requests only.

One table row per concurrency on stdout; with --json-out FILE also one JSON
object a line (appended), for bench/results/*.jsonl. Every socket read has a
timeout (--timeout), so a server that hangs ends the run with errors rather
than hanging it. Exit status 1 when any request failed.
"""
import argparse
import datetime
import http.client
import json
import math
import platform
import sys
import threading
import time
import urllib.parse

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "every jovial kingdom near misty purple mountains beyond old silver rivers").split()


def percentile(xs, p):
    """Linear interpolation between closest ranks; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Client:
    def __init__(self, base_url, api_key, timeout):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise SystemExit("serve_bench: --base-url must be http://HOST:PORT")
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def headers(self):
        h = {"Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        return h

    def get_json(self, method, path, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, self.prefix + path,
                         body=json.dumps(body).encode() if body is not None else None,
                         headers=self.headers())
            r = conn.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data.decode("utf-8"))
            except ValueError:
                return r.status, None
        finally:
            conn.close()

    def stream(self, path, payload, chat):
        """One streamed request: a dict of timings and counts, error on failure."""
        out = {"error": None, "t_send": None, "t_first": None, "t_end": None, "events": 0,
               "gaps": [], "usage": None, "finish": None, "done": False}
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            out["t_send"] = time.perf_counter()
            conn.request("POST", self.prefix + path, body=json.dumps(payload).encode(),
                         headers=self.headers())
            r = conn.getresponse()
            if r.status != 200:
                out["error"] = "HTTP %d %s" % (r.status, r.read()[:200].decode("utf-8", "replace"))
                return out
            last = None
            deadline = out["t_send"] + self.timeout * 10
            while True:
                line = r.readline()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    out["done"] = True
                    continue
                now = time.perf_counter()
                if now > deadline:
                    out["error"] = "the stream outlived %d s" % (self.timeout * 10)
                    break
                ev = json.loads(data)
                if ev.get("usage"):
                    out["usage"] = ev["usage"]
                for ch in ev.get("choices") or []:
                    piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                    if piece:
                        out["events"] += 1
                        if last is None:
                            out["t_first"] = now
                        else:
                            out["gaps"].append(now - last)
                        last = now
                    if ch.get("finish_reason"):
                        out["finish"] = ch["finish_reason"]
            if out["error"] is None and not (out["done"] and out["finish"]):
                out["error"] = "incomplete stream ([DONE] %s, finish_reason %s)" % (
                    out["done"], out["finish"])
        except (OSError, http.client.HTTPException, ValueError) as e:
            out["error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            out["t_end"] = time.perf_counter()
            conn.close()
        return out


def words_text(n_words, tag):
    return " ".join([tag] + [WORDS[i % len(WORDS)] for i in range(max(0, n_words - 1))])


def calibrate_words(client, n_tokens, tag, use_tokenize):
    """(words, tokens): how many words make n_tokens (or the most that stay
    under it), by the server's /tokenize when it answers; tokens None when not
    measured (then a word counts as a token)."""
    if not use_tokenize:
        return n_tokens, None
    n_words, best = n_tokens, None
    for _ in range(12):
        try:
            st, j = client.get_json("POST", "/tokenize", {"content": words_text(n_words, tag)})
        except (OSError, http.client.HTTPException):
            break
        if st != 200 or not isinstance(j, dict) or not isinstance(j.get("tokens"), list):
            break
        m = len(j["tokens"])
        if m <= n_tokens and (best is None or m > best[1]):
            best = (n_words, m)
        if m == n_tokens:
            break
        step = round(n_words * n_tokens / m) if m else n_words * 2
        if step == n_words:
            step += 1 if m < n_tokens else -1
        if best is not None and step <= best[0] and m > n_tokens:
            break  # between two word counts: keep the one under
        n_words = max(1, step)
    return best if best else (n_tokens, None)


def run_level(client, a, model, conc, prompts):
    chat = a.endpoint == "chat"
    path = "/v1/chat/completions" if chat else "/v1/completions"
    results = []
    lock = threading.Lock()
    gate = threading.Event()

    def worker(c):
        gate.wait()
        for k in range(a.requests):
            prompt = prompts[(c * a.requests + k) % len(prompts)]
            payload = {"model": model, "max_tokens": a.max_tokens, "temperature": a.temperature,
                       "stream": True, "stream_options": {"include_usage": True}}
            if a.seed is not None:
                payload["seed"] = a.seed + c * a.requests + k
            if a.ignore_eos:
                payload["ignore_eos"] = True
            if chat:
                payload["messages"] = [{"role": "user", "content": prompt}]
            else:
                payload["prompt"] = prompt
            res = client.stream(path, payload, chat)
            with lock:
                results.append(res)
    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in range(conc)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    ok = [r for r in results if r["error"] is None]
    errors = [r["error"] for r in results if r["error"] is not None]
    if results:
        t0 = min(r["t_send"] for r in results if r["t_send"] is not None)
        t1 = max(r["t_end"] for r in results)
    else:
        t0 = t1 = 0
    wall = t1 - t0

    def ntok(r):
        u = r["usage"] or {}
        return u.get("completion_tokens") if isinstance(u.get("completion_tokens"), int) else r["events"]
    gen = sum(ntok(r) for r in ok)
    events = sum(r["events"] for r in ok)
    ttft = [(r["t_first"] - r["t_send"]) * 1e3 for r in ok if r["t_first"] is not None]
    itl = [g * 1e3 for r in ok for g in r["gaps"]]
    per_req = [(ntok(r) - 1) / (r["t_end"] - r["t_first"]) for r in ok
               if r["t_first"] is not None and ntok(r) > 1 and r["t_end"] > r["t_first"]]
    pts = [(r["usage"] or {}).get("prompt_tokens") for r in ok]
    pts = [p for p in pts if isinstance(p, int)]
    return {
        "concurrency": conc, "requests": len(results), "completed": len(ok), "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "gen_tokens": gen, "wall_s": round(wall, 3),
        "gen_tok_s": round(gen / wall, 1) if wall > 0 else None,
        "tokens_per_event": round(gen / events, 2) if events else None,
        "prompt_tokens_mean": round(sum(pts) / len(pts), 1) if pts else None,
        "ttft_ms": {p: rnd(percentile(ttft, int(p[1:]))) for p in ("p50", "p90", "p99")},
        "itl_ms": {p: rnd(percentile(itl, int(p[1:]))) for p in ("p50", "p90", "p99")},
        "req_decode_tok_s_p50": rnd(percentile(per_req, 50)),
    }


def rnd(x, nd=2):
    return None if x is None else round(x, nd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="http://HOST:PORT of the server")
    ap.add_argument("--concurrency", default="1,4,16", help="comma list of client counts")
    ap.add_argument("--requests", type=int, default=4, help="requests per client (default 4)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=None, help="base seed (request i gets seed + i)")
    ap.add_argument("--ignore-eos", action="store_true",
                    help="send ignore_eos: true (llama-server honours it; a server that does "
                         "not know it may refuse it)")
    ap.add_argument("--shared-prompt", action="store_true", help="every request the same prompt")
    ap.add_argument("--no-tokenize", action="store_true",
                    help="do not size the prompt with the server's /tokenize")
    ap.add_argument("--model", default=None, help="the model name to send (default: /v1/models' first)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--timeout", type=float, default=120, help="seconds for one socket read")
    ap.add_argument("--warmup", type=int, default=1, help="requests before measuring (default 1)")
    ap.add_argument("--label", default="", help="a name for the rows (e.g. headroom, llama.cpp)")
    ap.add_argument("--json-out", default=None, help="append one JSON object a row to this file")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    if not levels or min(levels) < 1 or a.requests < 1:
        ap.error("--concurrency takes positive counts, --requests a positive number")

    client = Client(a.base_url, a.api_key, a.timeout)
    try:
        st, j = client.get_json("GET", "/v1/models")
    except (OSError, http.client.HTTPException) as e:
        print("serve_bench: cannot reach %s: %s" % (a.base_url, e), file=sys.stderr)
        return 1
    model = a.model
    if model is None:
        model = (j or {}).get("data", [{}])[0].get("id") if st == 200 and isinstance(j, dict) else None
        model = model or "default"
    n_prompts = 1 if a.shared_prompt else max(levels) * a.requests
    n_words, n_prompt_tok = calibrate_words(client, a.prompt_tokens, "Request 0:", not a.no_tokenize)
    prompts = [words_text(n_words, "Request:" if a.shared_prompt else "Request %d:" % i)
               for i in range(n_prompts)]
    info = {"bench": "serve", "label": a.label, "base_url": a.base_url, "model": model,
            "endpoint": a.endpoint, "prompt_tokens": n_prompt_tok or a.prompt_tokens,
            "max_tokens": a.max_tokens, "temperature": a.temperature, "ignore_eos": a.ignore_eos,
            "shared_prompt": a.shared_prompt, "requests_per_client": a.requests,
            "client_host": platform.node(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    print("serve_bench: %s model %r, %s, prompt %s tokens%s, max_tokens %d, %d requests a client"
          % (a.base_url, model, a.endpoint, n_prompt_tok or "~%d" % a.prompt_tokens,
             "" if n_prompt_tok else " (not measured)", a.max_tokens, a.requests), flush=True)
    if a.warmup:
        w = run_level(client, argparse.Namespace(**{**vars(a), "requests": a.warmup}), model, 1,
                      prompts[:1])
        if w["errors"]:
            print("serve_bench: the warm-up failed: %s" % w["error_examples"], file=sys.stderr)
            return 1
    hdr = ("%5s %5s %4s %8s %8s %9s | %8s %8s %8s | %7s %7s %7s | %8s %5s"
           % ("conc", "reqs", "err", "gen tok", "wall s", "gen tok/s", "ttft p50", "p90", "p99",
              "itl p50", "p90", "p99", "req tok/s", "t/ev"))
    print(hdr)
    failed = False
    for c in levels:
        row = run_level(client, a, model, c, prompts)
        failed = failed or row["errors"] > 0

        def f(x, w, nd=1):
            return ("%*.*f" % (w, nd, x)) if isinstance(x, (int, float)) else "%*s" % (w, "-")
        print("%5d %5d %4d %8d %8.2f %9s | %8s %8s %8s | %7s %7s %7s | %8s %5s" % (
            c, row["requests"], row["errors"], row["gen_tokens"], row["wall_s"],
            f(row["gen_tok_s"], 9), f(row["ttft_ms"]["p50"], 8), f(row["ttft_ms"]["p90"], 8),
            f(row["ttft_ms"]["p99"], 8), f(row["itl_ms"]["p50"], 7, 2), f(row["itl_ms"]["p90"], 7, 2),
            f(row["itl_ms"]["p99"], 7, 2), f(row["req_decode_tok_s_p50"], 8), f(row["tokens_per_event"], 5, 2)),
            flush=True)
        for e in row["error_examples"]:
            print("      error: %s" % e)
        if a.json_out:
            with open(a.json_out, "a") as fo:
                fo.write(json.dumps({**info, **row}) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
