#!/usr/bin/env python3
"""Checks a running `headroom serve` from the outside, as its clients see it.

    python3 tools/serve_test.py --base-url http://127.0.0.1:PORT [--headroom build/bin/headroom]
        [--model-path MODEL] [--pid PID] [--ctx N] [--chat-template yes|no]
        [--checks LIST | --skip LIST] [--api-key KEY] [--run-args "--device cpu --threads 2"]

It starts nothing: tests/sh_serve.sh starts the servers and calls it once per
server. Requests go through the official `openai` client (PyPI) where the
check is about what a client sees, and through raw http.client where the
check needs the bytes (server-sent events up to `data: [DONE]`, status codes
of malformed requests, headers such as Retry-After, a socket closed mid-way).
Every socket read has a timeout and the whole run a watchdog (--deadline), so
a server that hangs fails the checks instead of hanging them.

Prints one line per check ("PASS name: detail", "FAIL name: detail", "SKIP
name: why"), then "N passed, M failed"; exit status 1 when any failed, 0
otherwise (2: bad usage).

Check groups (--checks takes a comma list; default: every group but auth and
queue, which need a server started for them):
  models      GET /v1/models and /health
  completions non-streamed completions: shape, finish_reason, usage sums;
              sampling parameters (top_p, top_k, min_p, penalties, n > 1)
  stream      streamed == non-streamed for greedy (completions, and chat with
              a template): concatenated deltas, finish_reason, usage chunk
              (stream_options.include_usage), event shapes, [DONE] last
  stop        stop strings (a string and a list; streamed and not): the text
              ends right before the stop string, finish_reason "stop"
  seed        same seed and temperature 0.8 -> same text; other seeds differ
  usage       prompt_tokens == the prompt's tokens (as /tokenize and
              `headroom run` count them), completion_tokens == tokens generated
  tokenize    /tokenize == `headroom tokenize`; /detokenize round trips
  run         greedy completion == `headroom run --temp 0` (alone)
  run_load    the same with 31 other requests running (and one sent with them)
  chat        chat completions (a model with a template; == `headroom chat`),
              or a 400 for a model without one (--chat-template no)
  context     a prompt longer than the context: 400 with the numbers
  metrics     /metrics: Prometheus text, the documented families, counters
              that move by a request's usage, well-formed histograms
  disconnect  a client that leaves mid-stream: its request stops and its KV
              blocks come back (/metrics, within seconds)
  load        256 concurrent streaming clients (two waves), each response
              complete and its own; RSS flat between the waves; /health after
  malformed   100 malformed requests mixed with good ones: each a 4xx with an
              error object, the good ones unharmed
  auth        (--api-key KEY) no or a wrong bearer key: 401; the key: 200
  queue       (server with --parallel 1 --queue 1) a burst of slow requests:
              429 with Retry-After for those that find the queue full
"""
import argparse
import http.client
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse

try:
    import openai
except ImportError:  # the wrapper installs it; alone, say so
    print("SKIP: the openai package is missing (python3 -m pip install --user openai)")
    sys.exit(77)

ALL_GROUPS = ["models", "completions", "stream", "stop", "seed", "usage", "tokenize", "run",
              "run_load", "chat", "context", "metrics", "disconnect", "load", "malformed", "idle"]
EXTRA_GROUPS = ["auth", "queue"]

# Shakespeare-ish prompts: the embedded model knows this register; any model can continue them
NAMES = ["ROMEO", "JULIET", "HAMLET", "KING HENRY", "MACBETH", "OTHELLO", "KING LEAR", "PORTIA",
         "BRUTUS", "CORIOLANUS", "GLOUCESTER", "MENENIUS", "PETRUCHIO", "FALSTAFF", "PROSPERO",
         "HORATIO"]


def load_prompt(i):
    """16 distinct prompts of 3 to ~40 tokens: the longer ones fill whole KV
    blocks (16 tokens), so identical prompts under load also meet the prefix
    cache."""
    return NAMES[i % 16] + ":\n" + "Good morrow, my lord. " * ((i % 16) // 3) + "I"


# ---------------------------------------------------------------- raw HTTP


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def excerpt(self, n=160):
        t = self.body[:n].decode("utf-8", "replace").replace("\n", "\\n")
        return t + ("..." if len(self.body) > n else "")


class StreamResult:
    """One streamed request: the status, the parsed events, whether
    `data: [DONE]` came, and what went wrong if anything did."""

    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = b""        # the body when the status is not 200
        self.events = []       # parsed JSON of every data: line but [DONE]
        self.times = []        # perf_counter of each event
        self.done = False      # saw data: [DONE]
        self.after_done = 0    # events after [DONE] (should be none)
        self.error = None      # exception or protocol error, as text
        self.t_start = None
        self.t_end = None
        self.closed_early = False  # we closed it (on_event said stop)


class Http:
    def __init__(self, base_url, api_key, timeout):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise SystemExit("serve_test: --base-url must be http://HOST:PORT[/prefix]")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    def _headers(self, body_is_json, auth, headers):
        h = {}
        if body_is_json:
            h["Content-Type"] = "application/json"
        if auth is True and self.api_key:
            h["Authorization"] = "Bearer " + self.api_key
        elif isinstance(auth, str):
            h["Authorization"] = auth
        h.update(headers or {})
        return h

    def request(self, method, path, body=None, headers=None, timeout=None, auth=True):
        """body: None, bytes (sent as they are, as JSON) or an object (json.dumps)."""
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode("utf-8")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            conn.request(method, self.prefix + path, body=body,
                         headers=self._headers(body is not None, auth, headers))
            r = conn.getresponse()
            data = r.read()
            return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
        finally:
            conn.close()

    def stream(self, path, payload, timeout=None, deadline=None, on_event=None, auth=True,
               on_status=None):
        """POSTs payload and reads server-sent events until EOF. timeout: each
        socket read; deadline: perf_counter by which the whole stream must end.
        on_event(result) after each event: False closes the connection there
        (a client leaving). on_status(result) once the status line is read."""
        res = StreamResult()
        body = json.dumps(payload).encode("utf-8") if not isinstance(payload, bytes) else payload
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        res.t_start = time.perf_counter()
        try:
            conn.request("POST", self.prefix + path, body=body,
                         headers=self._headers(True, auth, {"Accept": "text/event-stream"}))
            r = conn.getresponse()
            res.status = r.status
            res.headers = {k.lower(): v for k, v in r.getheaders()}
            if on_status:
                on_status(res)
            if r.status != 200:
                res.body = r.read()
                return res
            data_lines = []
            while True:
                if deadline is not None and time.perf_counter() > deadline:
                    res.error = "the stream outlived its deadline"
                    break
                line = r.readline()
                if not line:  # EOF
                    if data_lines:
                        res.error = "the stream ended inside an event (no blank line)"
                    break
                line = line.rstrip(b"\r\n")
                if line:
                    if line.startswith(b"data:"):
                        data_lines.append(line[5:].lstrip(b" "))
                    # comments (":"), event:, id:, retry: lines are allowed and ignored
                    continue
                if not data_lines:
                    continue
                data = b"\n".join(data_lines)
                data_lines = []
                if data == b"[DONE]":
                    res.done = True
                    continue
                try:
                    ev = json.loads(data.decode("utf-8"))
                except (ValueError, UnicodeDecodeError):
                    res.error = "an event that is not JSON: %r" % data[:120]
                    break
                if res.done:
                    res.after_done += 1
                res.events.append(ev)
                res.times.append(time.perf_counter())
                if on_event is not None and on_event(res) is False:
                    res.closed_early = True
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    break
        except (OSError, http.client.HTTPException) as e:
            res.error = "%s: %s" % (type(e).__name__, e)
        finally:
            res.t_end = time.perf_counter()
            conn.close()
        return res


def stream_summary(res, chat):
    """Text, finish_reason, usage, ids and shape problems of a streamed response."""
    s = {"text": "", "finish": None, "usage": None, "ids": set(), "role": None, "problems": [],
         "n_content": 0}
    want_obj = "chat.completion.chunk" if chat else "text_completion"
    for ev in res.events:
        if not isinstance(ev, dict):
            s["problems"].append("an event that is not an object")
            continue
        if "error" in ev:
            s["problems"].append("an error event: %s" % json.dumps(ev)[:200])
            continue
        if ev.get("id") is not None:
            s["ids"].add(ev.get("id"))
        if ev.get("object") != want_obj:
            if "object %r" % ev.get("object") not in s["problems"]:
                s["problems"].append("object %r" % ev.get("object"))
        if ev.get("usage"):
            s["usage"] = ev["usage"]
        for ch in ev.get("choices") or []:
            if ch.get("index", 0) != 0:
                s["problems"].append("choice index %r" % ch.get("index"))
            if chat:
                d = ch.get("delta") or {}
                if d.get("role") and s["role"] is None:
                    s["role"] = d["role"]
                piece = d.get("content")
            else:
                piece = ch.get("text")
            if piece:
                s["text"] += piece
                s["n_content"] += 1
            if ch.get("finish_reason"):
                if s["finish"] is not None:
                    s["problems"].append("two finish_reasons")
                s["finish"] = ch["finish_reason"]
    return s


def error_object_problem(resp):
    """None when resp's body is an OpenAI-style error object, else what is wrong."""
    j = resp.json()
    if not isinstance(j, dict):
        return "the body is not a JSON object: %s" % resp.excerpt()
    e = j.get("error")
    if not isinstance(e, dict):
        return "no \"error\" object: %s" % resp.excerpt()
    if not isinstance(e.get("message"), str) or not e["message"]:
        return "error.message missing or empty: %s" % resp.excerpt()
    if not isinstance(e.get("type"), str) or not e["type"]:
        return "error.type missing: %s" % resp.excerpt()
    return None


def error_message(resp):
    j = resp.json()
    if isinstance(j, dict) and isinstance(j.get("error"), dict):
        return str(j["error"].get("message"))
    return resp.excerpt()


# ---------------------------------------------------------------- metrics

SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_prometheus(text):
    """(families {name: type}, samples [(name, labels dict, value)], problems)."""
    fams, samples, problems = {}, [], []
    for ln, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                fams[parts[2]] = parts[3].strip()
            continue
        m = SAMPLE_RE.match(line.strip())
        if not m:
            problems.append("line %d does not parse: %r" % (ln, line[:80]))
            continue
        labels = {}
        if m.group(3):
            rest = m.group(3).strip()
            pos = 0
            while pos < len(rest):
                lm = LABEL_RE.match(rest, pos)
                if not lm:
                    problems.append("line %d: bad labels %r" % (ln, rest[:60]))
                    break
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        try:
            v = float(m.group(4))
        except ValueError:
            problems.append("line %d: value %r" % (ln, m.group(4)))
            continue
        samples.append((m.group(1), labels, v))
    return fams, samples, problems


# what the issue lists for /metrics, found by name (the names are the server's):
# (what, include regex, exclude regex, wanted type)
METRIC_WANTS = [
    ("requests running", r"running", r"seconds|_time", "gauge"),
    ("requests waiting", r"waiting|queued|queue_(size|len|depth)|pending", r"seconds|_time", "gauge"),
    ("KV blocks used", r"kv.*(block|page).*(used|in_use|inuse)|kv.*(used|in_use).*(block|page)",
     r"ratio|share|frac|perc|util|usage", "gauge"),
    ("KV blocks share", r"kv.*(ratio|share|frac|perc|util|usage)", r"^$", "gauge"),
    ("prefix-cache hits", r"prefix.*hit", r"ratio|rate", "counter"),
    ("prefix-cache queries", r"prefix.*(quer|lookup)", r"^$", "counter"),
    ("prompt tokens", r"prompt_tokens", r"seconds|bucket|histogram|per_", "counter"),
    ("generated tokens", r"(generat|completion|output)\w*_tokens", r"seconds|bucket|per_", "counter"),
    ("time-to-first-token histogram", r"first_token|ttft", r"^$", "histogram"),
    ("inter-token latency histogram",
     r"inter_token|itl|per_output_token|tpot|between_tokens|token_latency", r"^$", "histogram"),
]


class Metrics:
    def __init__(self, text):
        self.text = text
        self.fams, self.samples, self.problems = parse_prometheus(text)
        self.names = sorted(set(self.fams) | {s[0] for s in self.samples})

    def family(self, what):
        """The family for one of METRIC_WANTS, or None."""
        for w, inc, exc, typ in METRIC_WANTS:
            if w != what:
                continue
            pool = list(self.fams) or self.names
            cands = [n for n in pool if re.search(inc, n) and not re.search(exc, n)]
            if not cands:
                return None
            typed = [n for n in cands if self.fams.get(n) == typ]
            return sorted(typed or cands, key=len)[0]
        raise KeyError(what)

    def value(self, fam):
        """The sum of a family's plain samples (name, name_total); None if absent."""
        vals = [v for n, lab, v in self.samples if n in (fam, fam + "_total")]
        return sum(vals) if vals else None

    def hist_count(self, fam):
        vals = [v for n, lab, v in self.samples if n == fam + "_count"]
        return sum(vals) if vals else None


# ---------------------------------------------------------------- the harness


class Harness:
    def __init__(self, args):
        self.a = args
        self.http = Http(args.base_url, args.api_key, args.timeout)
        base = args.base_url.rstrip("/")
        self.client = openai.OpenAI(base_url=base + "/v1", api_key=args.api_key or "sk-no-key",
                                    timeout=args.timeout, max_retries=0)
        self.passed = 0
        self.failed = 0
        self.lock = threading.Lock()
        self.model = None
        self.run_cache = {}
        self.ref_cache = {}
        self.cli_tokens_cache = {}

    # -- reporting
    def check(self, name, ok, detail=""):
        with self.lock:
            if ok:
                self.passed += 1
            else:
                self.failed += 1
            print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""),
                  flush=True)
        return ok

    def skip(self, name, why):
        print("SKIP %s: %s" % (name, why), flush=True)

    def info(self, text):
        print("     " + text, flush=True)

    # -- helpers
    def comp_payload(self, prompt, max_tokens, **kw):
        p = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        p.update(kw)
        return p

    def complete(self, prompt, max_tokens, stream=False, **kw):
        """A completion through the openai client, as a dict:
        text, finish, usage (prompt, completion, total) or None, id, events."""
        if stream:
            kw.setdefault("stream_options", {"include_usage": True})
            st = self.client.completions.create(model=self.model, prompt=prompt,
                                                max_tokens=max_tokens, stream=True, **kw)
            out = {"text": "", "finish": None, "usage": None, "ids": set(), "events": 0}
            for ch in st:
                out["events"] += 1
                out["ids"].add(ch.id)
                if ch.usage:
                    out["usage"] = (ch.usage.prompt_tokens, ch.usage.completion_tokens,
                                    ch.usage.total_tokens)
                for c in ch.choices or []:
                    out["text"] += c.text or ""
                    if c.finish_reason:
                        out["finish"] = c.finish_reason
            return out
        r = self.client.completions.create(model=self.model, prompt=prompt,
                                           max_tokens=max_tokens, **kw)
        u = r.usage
        return {"text": r.choices[0].text, "finish": r.choices[0].finish_reason,
                "usage": (u.prompt_tokens, u.completion_tokens, u.total_tokens) if u else None,
                "ids": {r.id}, "n_choices": len(r.choices), "object": r.object}

    def chat(self, messages, max_tokens, stream=False, **kw):
        if stream:
            kw.setdefault("stream_options", {"include_usage": True})
            st = self.client.chat.completions.create(model=self.model, messages=messages,
                                                     max_tokens=max_tokens, stream=True, **kw)
            out = {"text": "", "finish": None, "usage": None, "ids": set(), "role": None,
                   "events": 0}
            for ch in st:
                out["events"] += 1
                out["ids"].add(ch.id)
                if ch.usage:
                    out["usage"] = (ch.usage.prompt_tokens, ch.usage.completion_tokens,
                                    ch.usage.total_tokens)
                for c in ch.choices or []:
                    if c.delta.role and out["role"] is None:
                        out["role"] = c.delta.role
                    out["text"] += c.delta.content or ""
                    if c.finish_reason:
                        out["finish"] = c.finish_reason
            return out
        r = self.client.chat.completions.create(model=self.model, messages=messages,
                                                max_tokens=max_tokens, **kw)
        u = r.usage
        return {"text": r.choices[0].message.content or "", "finish": r.choices[0].finish_reason,
                "role": r.choices[0].message.role,
                "usage": (u.prompt_tokens, u.completion_tokens, u.total_tokens) if u else None,
                "ids": {r.id}, "object": r.object}

    def ref(self, prompt, max_tokens):
        """The server's greedy completion of prompt, alone, not streamed (raw, cached)."""
        key = (prompt, max_tokens)
        if key not in self.ref_cache:
            r = self.http.request("POST", "/v1/completions", self.comp_payload(prompt, max_tokens))
            j = r.json()
            if r.status != 200 or not isinstance(j, dict) or not j.get("choices"):
                raise RuntimeError("reference completion of %r: HTTP %d %s"
                                   % (prompt[:30], r.status, r.excerpt()))
            u = j.get("usage") or {}
            self.ref_cache[key] = {"text": j["choices"][0].get("text"),
                                   "finish": j["choices"][0].get("finish_reason"),
                                   "usage": (u.get("prompt_tokens"), u.get("completion_tokens"))}
        return self.ref_cache[key]

    def metrics(self):
        r = self.http.request("GET", "/metrics", timeout=15)
        if r.status != 200:
            raise RuntimeError("/metrics: HTTP %d %s" % (r.status, r.excerpt()))
        return Metrics(r.body.decode("utf-8", "replace"))

    def tokenize(self, text):
        r = self.http.request("POST", "/tokenize", {"content": text})
        j = r.json()
        if r.status != 200 or not isinstance(j, dict) or not isinstance(j.get("tokens"), list):
            raise RuntimeError("/tokenize: HTTP %d %s" % (r.status, r.excerpt()))
        return j["tokens"]

    def health_ok(self):
        try:
            r = self.http.request("GET", "/health", timeout=10)
            return r.status == 200, "HTTP %d %s" % (r.status, r.excerpt(80))
        except (OSError, http.client.HTTPException) as e:
            return False, "%s: %s" % (type(e).__name__, e)

    def alive(self):
        """Whether the server still answers /health and a one-token completion."""
        ok, detail = self.health_ok()
        if not ok:
            return False, "/health: " + detail
        try:
            r = self.http.request("POST", "/v1/completions", self.comp_payload("ROMEO:", 1),
                                  timeout=30)
            return r.status == 200, "a one-token completion: HTTP %d" % r.status
        except (OSError, http.client.HTTPException) as e:
            return False, "a one-token completion: %s: %s" % (type(e).__name__, e)

    def rss_kib(self):
        if not self.a.pid:
            return None
        try:
            with open("/proc/%d/status" % self.a.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    # -- the CLI, for comparisons
    def _cli(self, args, stdin=None):
        cmd = [self.a.headroom] + args
        p = subprocess.run(cmd, input=stdin, capture_output=True, timeout=180)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def model_args(self):
        return ["-m", self.a.model_path] if self.a.model_path else []

    def run_cli(self, prompt, n):
        """`headroom run --temp 0`: (text, prompt tokens, generated tokens, finish)."""
        key = (prompt, n)
        if key in self.run_cache:
            return self.run_cache[key]
        rc, out, err = self._cli(["run"] + self.model_args() +
                                 ["-p", prompt, "--temp", "0", "-n", str(n)] +
                                 shlex.split(self.a.run_args))
        if rc != 0:
            raise RuntimeError("headroom run exited %d: %s" % (rc, err.strip()[-300:]))
        if not out.endswith(b"\n"):
            raise RuntimeError("headroom run's stdout does not end with its newline")
        text = out[:-1].decode("utf-8")  # run prints the continuation, then one newline
        mp = re.search(r"prompt: (\d+) tokens?", err)
        mg = re.search(r"generation: (\d+) tokens?[^\[]*\[(\w+)", err)
        fin = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}
        res = (text, int(mp.group(1)) if mp else None, int(mg.group(1)) if mg else None,
               fin.get(mg.group(2)) if mg else None)
        self.run_cache[key] = res
        return res

    def cli_tokens(self, text, bos=True):
        key = (text, bos)
        if key not in self.cli_tokens_cache:
            rc, out, err = self._cli(["tokenize"] + self.model_args() + ([] if bos else ["--no-bos"]),
                                     stdin=text.encode("utf-8"))
            if rc != 0:
                raise RuntimeError("headroom tokenize exited %d: %s" % (rc, err.strip()[-200:]))
            self.cli_tokens_cache[key] = [int(t) for t in out.split()]
        return self.cli_tokens_cache[key]

    # ------------------------------------------------------------ groups

    def g_models(self):
        ok, detail = self.health_ok()
        self.check("health: GET /health is 200", ok, detail)
        r = self.http.request("GET", "/v1/models")
        j = r.json()
        good = (r.status == 200 and isinstance(j, dict) and j.get("object") == "list"
                and isinstance(j.get("data"), list) and j["data"]
                and all(isinstance(m, dict) and isinstance(m.get("id"), str) for m in j["data"]))
        self.check("models: GET /v1/models lists the model", good,
                   "HTTP %d %s" % (r.status, r.excerpt(200)))
        try:
            ids = [m.id for m in self.client.models.list()]
            self.check("models: the openai client lists it too", self.model in ids, repr(ids))
        except openai.OpenAIError as e:
            self.check("models: the openai client lists it too", False, repr(e))

    def g_completions(self):
        p = "ROMEO:"
        r = self.complete(p, 16, temperature=0)
        u = r["usage"]
        self.check("completions: text, finish_reason length at max_tokens 16",
                   isinstance(r["text"], str) and r["text"] and r["finish"] == "length",
                   "finish %r, text %r" % (r["finish"], r["text"][:60]))
        self.check("completions: object text_completion", r["object"] == "text_completion",
                   repr(r["object"]))
        self.check("completions: usage present, total = prompt + completion, completion = 16",
                   u is not None and u[0] > 0 and u[2] == u[0] + u[1] and u[1] == 16, repr(u))
        # raw shape
        resp = self.http.request("POST", "/v1/completions", self.comp_payload(p, 4))
        j = resp.json() or {}
        shape = (resp.status == 200 and isinstance(j.get("id"), str) and isinstance(j.get("created"), int)
                 and isinstance(j.get("model"), str) and isinstance(j.get("choices"), list)
                 and j["choices"] and j["choices"][0].get("index") == 0
                 and "application/json" in resp.headers.get("content-type", ""))
        self.check("completions: raw response shape (id, created, model, choices[0].index, JSON "
                   "content type)", shape, "HTTP %d %s" % (resp.status, resp.excerpt(200)))
        # the sampling parameters the issue names are accepted
        resp = self.http.request("POST", "/v1/completions", self.comp_payload(
            p, 8, temperature=0.8, top_p=0.9, top_k=40, min_p=0.05, seed=3, stop=["\n\n"]))
        self.check("completions: temperature, top_p, top_k, min_p, seed, stop accepted",
                   resp.status == 200, "HTTP %d %s" % (resp.status, resp.excerpt()))
        for par in ("presence_penalty", "frequency_penalty"):
            resp = self.http.request("POST", "/v1/completions", self.comp_payload(p, 4, **{par: 0.5}))
            ok = resp.status == 200 or (resp.status == 400 and error_object_problem(resp) is None
                                        and par.split("_")[0] in error_message(resp).lower())
            self.check("completions: %s works or is a clear 400 naming it" % par, ok,
                       "HTTP %d %s" % (resp.status, resp.excerpt()))
        resp = self.http.request("POST", "/v1/completions", self.comp_payload(p, 4, n=2))
        j = resp.json() or {}
        if resp.status == 200:
            ok = len(j.get("choices") or []) == 2
            self.check("completions: n=2 gives two choices (supported)", ok, resp.excerpt())
        else:
            self.check("completions: n=2 is a 400 with an error object",
                       resp.status == 400 and error_object_problem(resp) is None,
                       "HTTP %d %s" % (resp.status, resp.excerpt()))
        # prompt as a list of one string (the OpenAI shape) or a clear 400
        resp = self.http.request("POST", "/v1/completions", self.comp_payload([p], 4))
        self.check("completions: prompt as a one-string list works or is a 400",
                   resp.status == 200 or (resp.status == 400 and error_object_problem(resp) is None),
                   "HTTP %d %s" % (resp.status, resp.excerpt()))

    def g_stream(self):
        for p, n in (("ROMEO:", 24), ("JULIET:\nO", 16)):
            a = self.complete(p, n, temperature=0)
            b = self.complete(p, n, stream=True, temperature=0)
            self.check("stream: completions %r: concatenated deltas == non-streamed text" % p,
                       a["text"] == b["text"], "%r vs %r" % (b["text"][:80], a["text"][:80]))
            self.check("stream: completions %r: same finish_reason" % p, a["finish"] == b["finish"],
                       "%r vs %r" % (b["finish"], a["finish"]))
            self.check("stream: completions %r: include_usage chunk == non-streamed usage" % p,
                       b["usage"] is not None and b["usage"] == a["usage"],
                       "%r vs %r" % (b["usage"], a["usage"]))
            self.check("stream: completions %r: one id across chunks" % p, len(b["ids"]) == 1,
                       repr(b["ids"]))
        # raw: the bytes of the event stream
        res = self.http.stream("/v1/completions", self.comp_payload("ROMEO:", 8, stream=True),
                               deadline=time.perf_counter() + self.a.timeout)
        s = stream_summary(res, chat=False)
        self.check("stream: raw completions stream: 200, text/event-stream, [DONE] last, events "
                   "well-formed",
                   res.status == 200 and "text/event-stream" in res.headers.get("content-type", "")
                   and res.done and not res.after_done and not res.error and not s["problems"],
                   "HTTP %s, content-type %r, done %s, after %d, error %s, problems %s"
                   % (res.status, res.headers.get("content-type"), res.done, res.after_done,
                      res.error, s["problems"]))
        self.check("stream: without include_usage no usage chunk is required, text the same",
                   s["text"] == self.ref("ROMEO:", 8)["text"], repr(s["text"]))
        if self.a.chat_template == "yes":
            msgs = [{"role": "user", "content": "Name three colours."}]
            a = self.chat(msgs, 24, temperature=0)
            b = self.chat(msgs, 24, stream=True, temperature=0)
            self.check("stream: chat: concatenated deltas == non-streamed content",
                       a["text"] == b["text"], "%r vs %r" % (b["text"][:80], a["text"][:80]))
            self.check("stream: chat: same finish_reason, usage chunk == usage",
                       a["finish"] == b["finish"] and b["usage"] == a["usage"],
                       "%r %r vs %r %r" % (b["finish"], b["usage"], a["finish"], a["usage"]))
            self.check("stream: chat: the first delta has role assistant", b["role"] == "assistant",
                       repr(b["role"]))
            res = self.http.stream("/v1/chat/completions",
                                   {"model": self.model, "messages": msgs, "max_tokens": 8,
                                    "temperature": 0, "stream": True},
                                   deadline=time.perf_counter() + self.a.timeout)
            s = stream_summary(res, chat=True)
            self.check("stream: raw chat stream: chat.completion.chunk events, [DONE] last",
                       res.status == 200 and res.done and not res.error and not s["problems"],
                       "HTTP %s, done %s, error %s, problems %s"
                       % (res.status, res.done, res.error, s["problems"]))

    def g_stop(self):
        p = "ROMEO:"
        full = self.complete(p, 32, temperature=0)["text"]
        # a stop string from the middle of the greedy text (the first of its
        # occurrences decides); a 3-character one often straddles two tokens
        stop = None
        for k in range(max(1, len(full) // 3), len(full) - 3):
            cand = full[k:k + 3]
            if cand.strip() and full.find(cand) >= 1:
                stop = cand
                break
        if stop is None:
            self.check("stop: a stop string from the greedy text", False,
                       "the greedy text is too short: %r" % full)
            return
        want = full[:full.find(stop)]
        for form, value in (("string", stop), ("list", ["@@never@@", stop])):
            for streamed in (False, True):
                r = self.complete(p, 32, stream=streamed, temperature=0, stop=value)
                self.check("stop: %s %r (%s): text ends before it, finish_reason stop"
                           % (form, stop, "streamed" if streamed else "not streamed"),
                           r["text"] == want and r["finish"] == "stop",
                           "got %r finish %r, want %r" % (r["text"], r["finish"], want))
        # a stop string that never appears: finish length, full text
        r = self.complete(p, 32, temperature=0, stop=["@@never@@"])
        self.check("stop: an absent stop string changes nothing", r["text"] == full and
                   r["finish"] == "length", "got %r finish %r" % (r["text"][:60], r["finish"]))
        if self.a.chat_template == "yes":
            msgs = [{"role": "user", "content": "Count from one to ten in words."}]
            full = self.chat(msgs, 32, temperature=0)["text"]
            k = len(full) // 2
            stop = full[k:k + 3] if len(full) > 8 and full[k:k + 3].strip() else None
            if stop:
                want = full[:full.find(stop)]
                for streamed in (False, True):
                    r = self.chat(msgs, 32, stream=streamed, temperature=0, stop=[stop])
                    self.check("stop: chat %r (%s)" % (stop, "streamed" if streamed else "not streamed"),
                               r["text"] == want and r["finish"] == "stop",
                               "got %r finish %r, want %r" % (r["text"], r["finish"], want))
            else:
                self.check("stop: chat: a stop string from the greedy reply", False, repr(full))

    def g_seed(self):
        p = "HAMLET:"
        a = self.complete(p, 24, temperature=0.8, seed=1234)
        b = self.complete(p, 24, temperature=0.8, seed=1234)
        c = self.complete(p, 24, stream=True, temperature=0.8, seed=1234)
        self.check("seed: same seed, temperature 0.8: same text twice", a["text"] == b["text"],
                   "%r vs %r" % (a["text"][:60], b["text"][:60]))
        self.check("seed: streamed with the same seed: same text", a["text"] == c["text"],
                   "%r vs %r" % (c["text"][:60], a["text"][:60]))
        texts = {self.complete(p, 24, temperature=0.8, seed=s)["text"] for s in (1, 2, 3, 4, 5)}
        self.check("seed: five other seeds give at least two different texts", len(texts) >= 2,
                   "%d distinct" % len(texts))
        greedy = self.ref(p, 24)["text"]
        self.check("seed: sampled texts are not all the greedy one",
                   any(t != greedy for t in texts | {a["text"]}), "")
        if self.a.chat_template == "yes":
            msgs = [{"role": "user", "content": "Tell me a very short story."}]
            x = self.chat(msgs, 24, temperature=0.8, seed=99)
            y = self.chat(msgs, 24, temperature=0.8, seed=99)
            self.check("seed: chat, same seed: same reply", x["text"] == y["text"],
                       "%r vs %r" % (x["text"][:60], y["text"][:60]))

    def g_usage(self):
        for p in ("ROMEO:", "To be, or not to be, that is the question:"):
            r = self.complete(p, 12, temperature=0)
            toks = self.tokenize(p)
            u = r["usage"]
            # /tokenize may or may not include BOS: as the CLI does with and without it
            if self.a.headroom:
                with_bos = self.cli_tokens(p, True)
                want = len(with_bos)
                self.check("usage: %r: prompt_tokens == the prompt's tokens with BOS "
                           "(`headroom tokenize`)" % p, u and u[0] == want,
                           "usage %r, `headroom tokenize` %d, /tokenize %d" % (u, want, len(toks)))
            else:
                self.check("usage: %r: prompt_tokens == /tokenize's count (+1 for a BOS it leaves "
                           "out)" % p, u and u[0] in (len(toks), len(toks) + 1),
                           "usage %r, /tokenize %d" % (u, len(toks)))
            self.check("usage: %r: completion_tokens == 12 at finish length" % p,
                       u and (u[1] == 12 if r["finish"] == "length" else 0 < u[1] <= 12),
                       "usage %r finish %r" % (u, r["finish"]))
            if self.a.headroom:
                text, n_p, n_g, fin = self.run_cli(p, 12)
                self.check("usage: %r: prompt/completion tokens == `headroom run`'s counts" % p,
                           u and (u[0], u[1]) == (n_p, n_g), "server %r, run %r" % (u, (n_p, n_g)))
        # a stop string: completion_tokens counts every token generated (the one
        # holding the stop string too), as run reports them
        if self.a.headroom:
            full = self.run_cli("ROMEO:", 24)[0]
            k = len(full) // 2
            stop = full[k:k + 3]
            if stop.strip():
                r = self.complete("ROMEO:", 24, temperature=0, stop=stop)
                rc, out, err = self._cli(["run"] + self.model_args() +
                                         ["-p", "ROMEO:", "--temp", "0", "-n", "24", "--stop", stop] +
                                         shlex.split(self.a.run_args))
                mg = re.search(r"generation: (\d+) tokens?", err)
                self.check("usage: with stop %r completion_tokens == `headroom run --stop`'s count"
                           % stop, mg and r["usage"] and r["usage"][1] == int(mg.group(1)),
                           "server %r, run %s" % (r["usage"], mg.group(1) if mg else err[-200:]))
        if self.a.chat_template == "yes":
            msgs = [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "What is the capital of France?"}]
            r = self.chat(msgs, 12, temperature=0)
            u = r["usage"]
            n_content = len(self.tokenize("What is the capital of France?"))
            self.check("usage: chat: prompt_tokens counts the template too, completion <= 12, sums",
                       u and u[0] > n_content + 4 and 0 < u[1] <= 12 and u[2] == u[0] + u[1]
                       and (u[1] == 12 or r["finish"] != "length"),
                       "usage %r finish %r (content alone %d tokens)" % (u, r["finish"], n_content))

    def g_tokenize(self):
        samples = ["Hello world", "ROMEO:\nBut, soft! what light through yonder window breaks?",
                   "caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e \U0001F642", "a\n\n\tb  c", "1234567890"]
        for s in samples:
            try:
                toks = self.tokenize(s)
            except RuntimeError as e:
                self.check("tokenize: %r" % s[:20], False, str(e))
                continue
            ok = all(isinstance(t, int) for t in toks) and toks
            if self.a.headroom:
                wb, nb = self.cli_tokens(s, True), self.cli_tokens(s, False)
                which = "with BOS" if toks == wb else "without BOS" if toks == nb else None
                self.check("tokenize: %r == `headroom tokenize`" % s[:20], ok and which is not None,
                           "%s; server %r, cli %r" % (which, toks[:12], wb[:12]))
            r = self.http.request("POST", "/detokenize", {"tokens": toks})
            j = r.json() or {}
            back = j.get("content")
            bos_dropped = None
            if back != s and toks and self.a.headroom and toks[0] == self.cli_tokens(s, True)[0] \
                    and len(self.cli_tokens(s, True)) > len(self.cli_tokens(s, False)):
                r2 = self.http.request("POST", "/detokenize", {"tokens": toks[1:]})
                bos_dropped = (r2.json() or {}).get("content")
            self.check("tokenize: %r: /detokenize(/tokenize(s)) == s" % s[:20],
                       r.status == 200 and (back == s or bos_dropped == s),
                       "HTTP %d, got %r%s" % (r.status, back,
                                               "" if bos_dropped is None else
                                               ", without the BOS %r" % bos_dropped))
        r = self.http.request("POST", "/tokenize", {"content": ""})
        self.check("tokenize: empty content is 200 with a list", r.status == 200 and
                   isinstance((r.json() or {}).get("tokens"), list), r.excerpt())
        r = self.http.request("POST", "/detokenize", {"tokens": []})
        self.check("detokenize: no tokens is 200 with \"\"", r.status == 200 and
                   (r.json() or {}).get("content") == "", r.excerpt())

    def g_run(self):
        if not self.a.headroom:
            self.skip("run", "no --headroom to compare with")
            return
        for p, n in (("ROMEO:", 24), ("KING HENRY:\nNow", 32), (load_prompt(13), 16)):
            text, n_p, n_g, fin = self.run_cli(p, n)
            r = self.complete(p, n, temperature=0)
            self.check("run: greedy %r, %d tokens == `headroom run --temp 0`" % (p[:16], n),
                       r["text"] == text and r["finish"] == fin,
                       "server %r (%s), run %r (%s)" % (r["text"][:60], r["finish"], text[:60], fin))

    def g_run_load(self):
        if not self.a.headroom:
            self.skip("run_load", "no --headroom to compare with")
            return
        probe_p, probe_n = "ROMEO:", 24
        text, _, _, fin = self.run_cli(probe_p, probe_n)
        n_bg = 31
        bg_max = 96
        bg = [None] * n_bg
        first = [threading.Event() for _ in range(n_bg)]
        deadline = time.perf_counter() + self.a.load_timeout

        def bg_one(i):
            kw = {"temperature": 0} if i % 2 else {"temperature": 0.8, "seed": 100 + i}
            payload = self.comp_payload(load_prompt(i), bg_max, stream=True,
                                        stream_options={"include_usage": True}, **kw)

            def on_ev(res):
                first[i].set()
                return True
            bg[i] = self.http.stream("/v1/completions", payload, timeout=self.a.load_timeout,
                                     deadline=deadline, on_event=on_ev)
            first[i].set()

        threads = [threading.Thread(target=bg_one, args=(i,), daemon=True) for i in range(n_bg)]
        for t in threads:
            t.start()
        # a probe sent with them: its prefill and decode share steps with theirs
        probe_with = {}

        def probe_with_fn():
            try:
                probe_with["r"] = self.complete(probe_p, probe_n, temperature=0)
            except Exception as e:  # noqa: BLE001 (reported below)
                probe_with["e"] = repr(e)
        pw = threading.Thread(target=probe_with_fn, daemon=True)
        pw.start()
        for i in range(n_bg):
            first[i].wait(max(0.1, deadline - time.perf_counter()))
        t0 = time.perf_counter()
        running_at_start = sum(1 for i in range(n_bg) if bg[i] is None)
        try:
            m = self.metrics()
            fam = m.family("requests running")
            metric_running = m.value(fam) if fam else None
        except Exception:  # noqa: BLE001 (only a detail)
            metric_running = None
        r = self.complete(probe_p, probe_n, temperature=0)
        t1 = time.perf_counter()
        running_at_end = sum(1 for i in range(n_bg) if bg[i] is None or bg[i].t_end > t1)
        pw.join(max(0.1, deadline - time.perf_counter()))
        self.check("run_load: greedy == `headroom run` while 31 others run",
                   r["text"] == text and r["finish"] == fin,
                   "server %r (%s), run %r (%s); %d of 31 running at its start (/metrics says %s), "
                   "%d at its end, %.1f s"
                   % (r["text"][:50], r["finish"], text[:50], fin, running_at_start, metric_running,
                      running_at_end, t1 - t0))
        self.check("run_load: the 31 others were all running when it started", running_at_start == n_bg,
                   "%d of 31" % running_at_start)
        pr = probe_with.get("r")
        self.check("run_load: greedy == `headroom run` when sent with the 31 (prefills mixed)",
                   pr is not None and pr["text"] == text and pr["finish"] == fin,
                   probe_with.get("e") or "server %r, run %r" % (pr["text"][:50] if pr else None,
                                                                 text[:50]))
        for t in threads:
            t.join(max(0.1, deadline - time.perf_counter()))
        bad = []
        for i, res in enumerate(bg):
            if res is None:
                bad.append("%d: still running at the deadline" % i)
                continue
            s = stream_summary(res, chat=False)
            if res.status != 200 or not res.done or res.error or s["problems"] or not s["finish"]:
                bad.append("%d: HTTP %s done %s finish %s error %s %s" % (
                    i, res.status, res.done, s["finish"], res.error, s["problems"][:2]))
        self.check("run_load: the 31 others all completed ([DONE], finish_reason)", not bad,
                   "; ".join(bad[:4]))

    def g_chat(self):
        if self.a.chat_template == "no":
            for stream in (False, True):
                r = self.http.request("POST", "/v1/chat/completions", {
                    "model": self.model, "messages": [{"role": "user", "content": "Hello"}],
                    "max_tokens": 4, "stream": stream})
                self.check("chat: a model without a chat template: 400 with an error object (%s)"
                           % ("streamed" if stream else "not streamed"),
                           r.status == 400 and error_object_problem(r) is None,
                           "HTTP %d %s" % (r.status, r.excerpt()))
            try:
                self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": "Hello"}], max_tokens=4)
                self.check("chat: the openai client gets BadRequestError", False, "it succeeded")
            except openai.BadRequestError as e:
                self.check("chat: the openai client gets BadRequestError", True,
                           str(e)[:160])
            except openai.OpenAIError as e:
                self.check("chat: the openai client gets BadRequestError", False, repr(e)[:200])
            return
        system, user = "Be brief.", "What is the capital of France?"
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        r = self.chat(msgs, 24, temperature=0)
        self.check("chat: a reply, role assistant, object chat.completion",
                   r["text"] and r["role"] == "assistant" and r["object"] == "chat.completion"
                   and r["finish"] in ("stop", "length"),
                   "%r role %r object %r finish %r" % (r["text"][:60], r["role"], r["object"],
                                                       r["finish"]))
        if self.a.headroom:
            rc, out, err = self._cli(["chat"] + self.model_args() +
                                     ["--temp", "0", "-n", "24", "--system", system] +
                                     shlex.split(self.a.run_args),
                                     stdin=(user + "\n/stats\n").encode("utf-8"))
            want = out.decode("utf-8", "replace")
            want = want[:-1] if want.endswith("\n") else want
            m = re.search(r"last reply: (\d+) prompt tokens.*?(\d+) tokens written", err)
            self.check("chat: greedy reply == `headroom chat --temp 0`'s", rc == 0 and r["text"] == want,
                       "server %r, chat %r%s" % (r["text"][:60], want[:60],
                                                 "" if rc == 0 else " (exit %d: %s)" % (rc, err[-200:])))
            self.check("chat: usage == `headroom chat`'s prompt tokens and tokens written",
                       m is not None and r["usage"] is not None
                       and (r["usage"][0], r["usage"][1]) == (int(m.group(1)), int(m.group(2))),
                       "server %r, chat %s" % (r["usage"], m.groups() if m else err[-200:]))
        # several turns, an assistant turn included
        msgs2 = msgs + [{"role": "assistant", "content": "Paris."},
                        {"role": "user", "content": "And of Italy?"}]
        r2 = self.chat(msgs2, 16, temperature=0)
        self.check("chat: several turns", bool(r2["text"]) and r2["usage"][0] > r["usage"][0],
                   "%r usage %r" % (r2["text"][:60], r2["usage"]))
        # content as a list of text parts (the newer OpenAI shape) or a clear 400
        resp = self.http.request("POST", "/v1/chat/completions", {
            "model": self.model, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]})
        self.check("chat: content as text parts works or is a 400",
                   resp.status == 200 or (resp.status == 400 and error_object_problem(resp) is None),
                   "HTTP %d %s" % (resp.status, resp.excerpt()))

    def g_context(self):
        ctx = self.a.ctx
        words = (ctx + 64) if ctx else 20000
        long_prompt = " ".join(NAMES[i % 16].split()[0].lower() for i in range(words))
        n_tok = len(self.tokenize(long_prompt))
        r = self.http.request("POST", "/v1/completions", self.comp_payload(long_prompt, 8))
        msg = error_message(r)
        nums = set(re.findall(r"\d+", msg))
        self.check("context: a prompt longer than the context is a 400 with an error object",
                   r.status == 400 and error_object_problem(r) is None,
                   "HTTP %d %s" % (r.status, r.excerpt(200)))
        if ctx:
            self.check("context: the message gives the numbers (the context %d, the prompt's "
                       "%d tokens)" % (ctx, n_tok),
                       str(ctx) in nums and (str(n_tok) in nums or str(n_tok + 1) in nums
                                             or str(n_tok - 1) in nums), repr(msg))
        if self.a.chat_template == "yes":
            r = self.http.request("POST", "/v1/chat/completions", {
                "model": self.model, "max_tokens": 8,
                "messages": [{"role": "user", "content": long_prompt}]})
            self.check("context: the same in a chat message: 400", r.status == 400 and
                       error_object_problem(r) is None, "HTTP %d %s" % (r.status, r.excerpt(200)))
        ok, detail = self.health_ok()
        self.check("context: the server still serves", ok and self.ref("ROMEO:", 4)["text"] is not None,
                   detail)

    def g_metrics(self):
        r = self.http.request("GET", "/metrics")
        self.check("metrics: GET /metrics is 200, text/plain", r.status == 200 and
                   r.headers.get("content-type", "").startswith("text/plain"),
                   "HTTP %d content-type %r" % (r.status, r.headers.get("content-type")))
        m = Metrics(r.body.decode("utf-8", "replace"))
        self.check("metrics: every line is Prometheus text", not m.problems and m.samples,
                   "; ".join(m.problems[:3]) or "%d samples" % len(m.samples))
        found = {}
        for what, _, _, typ in METRIC_WANTS:
            fam = m.family(what)
            found[what] = fam
            self.check("metrics: %s (%s)" % (what, typ), fam is not None and
                       (m.value(fam) is not None or m.hist_count(fam) is not None),
                       "%s %s" % (fam, m.fams.get(fam, "")) if fam else
                       "none of: %s" % ", ".join(m.names[:40]))
        # histograms well-formed: buckets cumulative, +Inf == _count, _sum present
        for fam, typ in sorted(m.fams.items()):
            if typ != "histogram":
                continue
            series = {}
            for n, lab, v in m.samples:
                if n == fam + "_bucket":
                    key = tuple(sorted((k, x) for k, x in lab.items() if k != "le"))
                    series.setdefault(key, []).append((lab.get("le"), v))
            probs = []
            for key, bs in series.items():
                try:
                    les = [float(le) for le, _ in bs]
                except (TypeError, ValueError):
                    probs.append("bad le")
                    continue
                vals = [v for _, v in sorted(zip(les, [v for _, v in bs]))]
                if les[-1] != float("inf") and float("inf") not in les:
                    probs.append("no +Inf bucket")
                if any(b < a for a, b in zip(vals, vals[1:])):
                    probs.append("buckets not cumulative")
                cnt = [v for n, lab, v in m.samples if n == fam + "_count"
                       and tuple(sorted(lab.items())) == key]
                if not cnt or cnt[0] != max(vals):
                    probs.append("_count != +Inf bucket")
            if not any(n == fam + "_sum" for n, _, _ in m.samples):
                probs.append("no _sum")
            self.check("metrics: histogram %s well-formed" % fam, series and not probs,
                       ", ".join(sorted(set(probs))) or "%d series" % len(series))
        # one request moves the counters by its usage, and the latency histograms by one
        m0 = self.metrics()
        resp = self.complete("PROSPERO:\nNow", 10, temperature=0)
        time.sleep(0.3)  # let the engine thread publish
        m1 = self.metrics()
        u = resp["usage"]
        for what, idx in (("prompt tokens", 0), ("generated tokens", 1)):
            fam = found.get(what)
            if fam:
                d = (m1.value(fam) or 0) - (m0.value(fam) or 0)
                self.check("metrics: %s grows by the request's usage (%s)" % (what, fam),
                           u is not None and d == u[idx], "grew by %s, usage %r" % (d, u))
        fam = found.get("time-to-first-token histogram")
        if fam:
            d = (m1.hist_count(fam) or 0) - (m0.hist_count(fam) or 0)
            self.check("metrics: %s counts the request once" % fam, d == 1, "grew by %s" % d)
        fam = found.get("inter-token latency histogram")
        if fam:
            d = (m1.hist_count(fam) or 0) - (m0.hist_count(fam) or 0)
            self.check("metrics: %s counts its gaps (completion_tokens - 1 = %s, or one per request)"
                       % (fam, u[1] - 1 if u else "?"), u is not None and d in (u[1] - 1, 1),
                       "grew by %s" % d)
        for what in ("requests running", "requests waiting"):
            fam = found.get(what)
            if fam:
                self.check("metrics: %s is 0 when idle" % what, m1.value(fam) == 0,
                           "%s = %s" % (fam, m1.value(fam)))
        fam = found.get("KV blocks share")
        if fam:
            v = m1.value(fam)
            self.check("metrics: KV share in [0, 1] (or a percentage)", v is not None and 0 <= v <= 100,
                       "%s = %s" % (fam, v))
        # the same prompt twice, long enough for whole blocks: prefix hits grow
        fam_h, fam_q = found.get("prefix-cache hits"), found.get("prefix-cache queries")
        if fam_h and fam_q:
            p = load_prompt(15) + " " + load_prompt(14)
            self.ref(p, 2)
            m2 = self.metrics()
            self.complete(p, 2, temperature=0)
            time.sleep(0.3)
            m3 = self.metrics()
            dh = (m3.value(fam_h) or 0) - (m2.value(fam_h) or 0)
            dq = (m3.value(fam_q) or 0) - (m2.value(fam_q) or 0)
            self.check("metrics: a repeated prompt of whole blocks: prefix-cache hits and queries grow",
                       dh > 0 and dq >= dh, "hits +%s, queries +%s" % (dh, dq))

    def g_disconnect(self):
        m = self.metrics()
        f_run, f_kv = m.family("requests running"), m.family("KV blocks used")
        f_gen = m.family("generated tokens")
        if not f_run or not f_kv:
            self.check("disconnect: /metrics has requests running and KV blocks used", False,
                       "running %s, KV %s" % (f_run, f_kv))
            return
        idle_kv, idle_run = m.value(f_kv), m.value(f_run)
        gen_before = m.value(f_gen) if f_gen else None
        max_tokens = max(64, (self.a.ctx or 512) - 32)
        seen = {"kv": None, "run": None}

        def on_ev(res):
            if len(res.events) == 3:  # mid-stream: the request holds its blocks
                try:
                    mm = self.metrics()
                    seen["kv"], seen["run"] = mm.value(f_kv), mm.value(f_run)
                except Exception:  # noqa: BLE001 (only a detail)
                    pass
                return False  # leave: close the socket
            return True
        payload = self.comp_payload("JULIET:\nO", max_tokens, stream=True, temperature=0.8, seed=5)
        t0 = time.perf_counter()
        res = self.http.stream("/v1/completions", payload, deadline=t0 + self.a.timeout, on_event=on_ev)
        t_close = time.perf_counter()
        per_tok = (res.times[-1] - res.times[0]) / max(1, len(res.times) - 1) if res.times else 0
        self.check("disconnect: a streamed request, left after 3 events", res.closed_early,
                   "HTTP %s, %d events, error %s" % (res.status, len(res.events), res.error))
        self.check("disconnect: it held KV blocks while it ran", seen["kv"] is not None and
                   seen["kv"] > idle_kv and seen["run"] >= 1,
                   "KV used %s (idle %s), running %s" % (seen["kv"], idle_kv, seen["run"]))
        back = None
        last = (None, None)
        while time.perf_counter() - t_close < 10:
            mm = self.metrics()
            last = (mm.value(f_kv), mm.value(f_run))
            if last[0] == idle_kv and last[1] == idle_run:
                back = time.perf_counter() - t_close
                break
            time.sleep(0.1)
        left = max_tokens - len(res.events)
        self.check("disconnect: KV blocks used and requests running back to idle within 5 s",
                   back is not None and back <= 5.0,
                   "after %s s; now KV %s running %s (idle %s, %s); the rest (%d tokens) would "
                   "take ~%.1f s" % (None if back is None else round(back, 2), last[0], last[1],
                                     idle_kv, idle_run, left, left * per_tok))
        if f_gen:
            g0 = self.metrics().value(f_gen)
            time.sleep(1.0)
            g1 = self.metrics().value(f_gen)
            self.check("disconnect: no tokens generated for it after that", g0 == g1,
                       "%s: %s -> %s in 1 s" % (f_gen, g0, g1))
            # what tells a cancelled request from one that ran to its end
            # (quickly enough to pass the checks above): the tokens it cost
            made = None if gen_before is None or g1 is None else g1 - gen_before
            self.check("disconnect: it stopped early: %s grew by less than half its max_tokens (%d)"
                       % (f_gen, max_tokens), made is not None and made < max_tokens // 2,
                       "grew by %s; %d events read" % (made, len(res.events)))
        ok, detail = self.health_ok()
        self.check("disconnect: the server still serves", ok and self.ref("ROMEO:", 4) is not None,
                   detail)

    def load_wave(self, label, n_clients, max_tokens):
        prompts = [load_prompt(i) for i in range(16)]
        refs = [self.ref(p, max_tokens) for p in prompts]
        results = [None] * n_clients
        deadline = time.perf_counter() + self.a.load_timeout
        gate = threading.Event()

        def one(i):
            gate.wait(30)
            payload = self.comp_payload(prompts[i % 16], max_tokens, stream=True,
                                        stream_options={"include_usage": True})
            try:
                results[i] = self.http.stream("/v1/completions", payload,
                                              timeout=self.a.load_timeout, deadline=deadline)
            except Exception as e:  # noqa: BLE001 (counted as a failure below)
                r = StreamResult()
                r.error = repr(e)
                results[i] = r

        old = threading.stack_size(256 * 1024)
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n_clients)]
        for t in threads:
            t.start()
        threading.stack_size(old)
        t0 = time.perf_counter()
        gate.set()
        for t in threads:
            t.join(max(0.1, deadline - time.perf_counter()))
        wall = time.perf_counter() - t0
        incomplete, wrong, usage_bad, idbad = [], [], [], []
        all_ids = {}
        for i, res in enumerate(results):
            if res is None:
                incomplete.append("%d: no answer by the deadline" % i)
                continue
            s = stream_summary(res, chat=False)
            ref = refs[i % 16]
            if res.status != 200 or not res.done or res.error or not s["finish"] or s["problems"]:
                incomplete.append("%d: HTTP %s done %s finish %s error %s %s %s" % (
                    i, res.status, res.done, s["finish"], res.error, s["problems"][:2],
                    res.body[:100] if res.status != 200 else ""))
                continue
            if s["text"] != ref["text"] or s["finish"] != ref["finish"]:
                wrong.append("%d (prompt %d): %r %s, alone %r %s" % (
                    i, i % 16, s["text"][:40], s["finish"], ref["text"][:40], ref["finish"]))
            u = s["usage"] or {}
            if (u.get("prompt_tokens"), u.get("completion_tokens")) != ref["usage"]:
                usage_bad.append("%d: %r vs %r" % (i, (u.get("prompt_tokens"),
                                                       u.get("completion_tokens")), ref["usage"]))
            if len(s["ids"]) != 1:
                idbad.append("%d: ids %r" % (i, s["ids"]))
            for x in s["ids"]:
                all_ids.setdefault(x, []).append(i)
        dup = {k: v for k, v in all_ids.items() if len(v) > 1}
        n = n_clients
        self.check("load %s: %d/%d streams complete (200, [DONE] last, finish_reason) in %.1f s"
                   % (label, n - len(incomplete), n, wall), not incomplete, "; ".join(incomplete[:4]))
        self.check("load %s: every text == its prompt's greedy text alone (identical prompts, "
                   "identical texts)" % label, not wrong and not incomplete,
                   "%d wrong, %d incomplete: %s" % (len(wrong), len(incomplete), "; ".join(wrong[:4])))
        self.check("load %s: every usage chunk == its prompt's usage alone" % label, not usage_bad,
                   "%d wrong: %s" % (len(usage_bad), "; ".join(usage_bad[:4])))
        self.check("load %s: one id a response, distinct across responses" % label,
                   not idbad and not dup, "; ".join(idbad[:3]) + (" duplicates: %r" % list(dup.items())[:3]
                                                                 if dup else ""))
        self.check("load %s: within %d s" % (label, self.a.load_timeout), wall < self.a.load_timeout,
                   "%.1f s" % wall)
        return results

    def g_load(self):
        n, mt = self.a.load_clients, self.a.load_max_tokens
        rss_start = self.rss_kib()
        self.load_wave("wave 1", n, mt)  # also warms every buffer 256 connections need
        time.sleep(0.5)
        rss0 = self.rss_kib()
        self.load_wave("wave 2", n, mt)
        time.sleep(0.5)
        rss1 = self.rss_kib()
        if self.a.no_rss:
            self.skip("load: RSS flat", "--no-rss (VmRSS %s -> %s -> %s KiB)" % (rss_start, rss0, rss1))
        elif rss0 is None or rss1 is None:
            self.skip("load: RSS flat", "no --pid (or /proc unreadable)")
        else:
            # after wave 1 every per-connection buffer, thread stack, malloc
            # arena and KV page the server needs at this concurrency exists; an
            # identical wave must reuse them: a leak of 32 KiB a request would
            # show as 8 MiB over 256 requests
            margin = self.a.rss_margin_mib * 1024
            self.check("load: RSS flat across wave 2 (within %d MiB)" % self.a.rss_margin_mib,
                       rss1 - rss0 <= margin,
                       "VmRSS at start %s KiB, after wave 1 %d KiB, after wave 2 %d KiB (%+d)"
                       % (rss_start, rss0, rss1, rss1 - rss0))
        ok, detail = self.health_ok()
        self.check("load: /health is 200 after the load", ok, detail)
        try:
            m = self.metrics()
            fam = m.family("requests running")
            fam_w = m.family("requests waiting")
            self.check("load: nothing left running or waiting",
                       (fam is None or m.value(fam) == 0) and (fam_w is None or m.value(fam_w) == 0),
                       "%s=%s %s=%s" % (fam, fam and m.value(fam), fam_w, fam_w and m.value(fam_w)))
        except RuntimeError as e:
            self.check("load: nothing left running or waiting", False, str(e))
        self.rss_after_load = rss1

    def bad_requests(self):
        """(name, method, path, body bytes or None) of malformed requests."""
        mdl = self.model
        c = "/v1/completions"
        ch = "/v1/chat/completions"

        def js(o):
            return json.dumps(o).encode()
        good_c = {"model": mdl, "prompt": "ROMEO:", "max_tokens": 4}
        good_ch = {"model": mdl, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}

        def with_(base, **kw):
            d = dict(base)
            d.update(kw)
            return js(d)
        bad = [
            ("truncated JSON", "POST", c, b'{"model": "x", "prompt": "ROMEO:"'),
            ("not JSON", "POST", c, b"prompt=ROMEO&max_tokens=4"),
            ("empty body", "POST", c, b""),
            ("a JSON array", "POST", c, b"[1, 2, 3]"),
            ("JSON null", "POST", c, b"null"),
            ("NaN in JSON", "POST", c, b'{"prompt": "ROMEO:", "temperature": NaN}'),
            ("trailing garbage", "POST", c, js(good_c) + b" }{"),
            ("nesting 100000 deep", "POST", c, b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}"),
            ("prompt a number", "POST", c, with_(good_c, prompt=123)),
            ("prompt an object", "POST", c, with_(good_c, prompt={"a": 1})),
            ("no prompt", "POST", c, js({"model": mdl, "max_tokens": 4})),
            ("max_tokens a string", "POST", c, with_(good_c, max_tokens="ten")),
            ("max_tokens negative", "POST", c, with_(good_c, max_tokens=-5)),
            ("max_tokens huge", "POST", c, with_(good_c, max_tokens=10 ** 12)),
            ("max_tokens 2^31", "POST", c, with_(good_c, max_tokens=2 ** 31)),
            ("max_tokens 1e300", "POST", c, with_(good_c, max_tokens=1e300)),
            ("temperature a string", "POST", c, with_(good_c, temperature="hot")),
            ("stream a string", "POST", c, with_(good_c, stream="yes")),
            ("stop a number", "POST", c, with_(good_c, stop=5)),
            ("seed a string", "POST", c, with_(good_c, seed="abc")),
            ("stream_options a string", "POST", c, with_(good_c, stream=True, stream_options="yes")),
            ("unknown model", "POST", c, with_(good_c, model="no-such-model-xyz")),
            ("invalid UTF-8 in the prompt", "POST", c,
             b'{"model": "' + mdl.encode() + b'", "prompt": "RO\xff\xfeMEO \xc3", "max_tokens": 4}'),
            ("overlong UTF-8 encoding", "POST", c,
             b'{"model": "' + mdl.encode() + b'", "prompt": "\xc0\xafetc", "max_tokens": 4}'),
            ("a lone surrogate escape", "POST", c,
             b'{"model": "' + mdl.encode() + b'", "prompt": "ab\\ud800cd", "max_tokens": 4}'),
            ("invalid UTF-8 in a chat message", "POST", ch,
             b'{"model": "' + mdl.encode() + b'", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}'),
            ("empty messages", "POST", ch, with_(good_ch, messages=[])),
            ("messages a string", "POST", ch, with_(good_ch, messages="hello")),
            ("a message without content", "POST", ch, with_(good_ch, messages=[{"role": "user"}])),
            ("a message role a number", "POST", ch,
             with_(good_ch, messages=[{"role": 5, "content": "x"}])),
            ("a message an array", "POST", ch, with_(good_ch, messages=[["user", "x"]])),
            ("chat max_tokens huge", "POST", ch, with_(good_ch, max_tokens=10 ** 12)),
            ("chat unknown model", "POST", ch, with_(good_ch, model="no-such-model-xyz")),
            ("tokenize content a number", "POST", "/tokenize", js({"content": 5})),
            ("tokenize invalid UTF-8", "POST", "/tokenize", b'{"content": "\xff"}'),
            ("detokenize tokens a string", "POST", "/detokenize", js({"tokens": "abc"})),
            ("detokenize a negative id", "POST", "/detokenize", js({"tokens": [1, -1]})),
            ("detokenize an id past the vocabulary", "POST", "/detokenize", js({"tokens": [10 ** 9]})),
            ("detokenize a float id", "POST", "/detokenize", js({"tokens": [1.5]})),
            ("an unknown path", "POST", "/v1/nothing-here", js(good_c)),
            ("GET on completions", "GET", c, None),
        ]
        if self.a.ctx:
            bad.append(("prompt past the context", "POST", c,
                        with_(good_c, prompt="a " * (self.a.ctx * 2))))
        return bad

    def g_malformed(self):
        kinds = self.bad_requests()
        total = self.a.malformed
        plan = [kinds[i % len(kinds)] for i in range(total)]
        # one body of 1 MiB too (a 413 or a 400, and quickly)
        plan[-1] = ("a 1 MiB prompt", "POST", "/v1/completions",
                    json.dumps({"model": self.model, "prompt": "x " * (1 << 19), "max_tokens": 4}).encode())
        # good requests alongside: streamed greedy ones, compared with their
        # lone texts afterwards
        good_prompts = [load_prompt(i) for i in range(8)]
        refs = [self.ref(p, 16) for p in good_prompts]
        good = [None] * 8
        deadline = time.perf_counter() + self.a.load_timeout

        def good_one(i):
            good[i] = self.http.stream("/v1/completions",
                                       self.comp_payload(good_prompts[i], 16, stream=True),
                                       deadline=deadline)
        gthreads = [threading.Thread(target=good_one, args=(i,), daemon=True) for i in range(8)]
        for t in gthreads:
            t.start()
        outcomes = [None] * total
        good_fail = []
        differ = []  # complete, but not the lone greedy text

        def bad_worker(w):
            for k in range(w, total, 8):
                name, method, path, body = plan[k]
                try:
                    r = self.http.request(method, path, body, timeout=30)
                    outcomes[k] = (name, r)
                except (OSError, http.client.HTTPException) as e:
                    outcomes[k] = (name, "%s: %s" % (type(e).__name__, e))
                if k % 10 == 9:  # a good one between the bad ones, not streamed
                    try:
                        g = self.http.request("POST", "/v1/completions",
                                              self.comp_payload(good_prompts[k % 8], 16), timeout=60)
                        j = g.json() or {}
                        txt = (j.get("choices") or [{}])[0].get("text")
                        if g.status != 200 or not isinstance(txt, str):
                            good_fail.append("interleaved %d: HTTP %d %s" % (k, g.status, g.excerpt(80)))
                        elif txt != refs[k % 8]["text"]:
                            differ.append("interleaved %d: %r (alone %r)" % (k, txt[:30],
                                                                           refs[k % 8]["text"][:30]))
                    except (OSError, http.client.HTTPException) as e:
                        good_fail.append("interleaved %d: %s" % (k, e))
        wthreads = [threading.Thread(target=bad_worker, args=(w,), daemon=True) for w in range(8)]
        t0 = time.perf_counter()
        for t in wthreads:
            t.start()
        for t in wthreads + gthreads:
            t.join(max(0.1, deadline - time.perf_counter()))
        wall = time.perf_counter() - t0
        fails = []
        by_status = {}
        for k, o in enumerate(outcomes):
            if o is None:
                fails.append("%d: no answer" % k)
                continue
            name, r = o
            if isinstance(r, str):
                fails.append("%s: %s" % (name, r))
                continue
            by_status[r.status] = by_status.get(r.status, 0) + 1
            prob = error_object_problem(r)
            if not (400 <= r.status < 500) or prob:
                fails.append("%s: HTTP %d %s" % (name, r.status, prob or r.excerpt(80)))
        self.check("malformed: %d/%d malformed requests got a 4xx with an error object (%.1f s)"
                   % (total - len(fails), total, wall), not fails,
                   "statuses %r; %s" % (by_status, "; ".join(sorted(set(fails))[:8])))
        for i, res in enumerate(good):
            if res is None:
                good_fail.append("stream %d: no answer by the deadline" % i)
                continue
            s = stream_summary(res, chat=False)
            if res.status != 200 or not res.done or res.error or not s["finish"]:
                good_fail.append("stream %d: HTTP %s done %s error %s finish %s" % (
                    i, res.status, res.done, res.error, s["finish"]))
            elif s["text"] != refs[i]["text"]:
                differ.append("stream %d: %r (alone %r)" % (i, s["text"][:30], refs[i]["text"][:30]))
        self.check("malformed: the good requests among them complete", not good_fail,
                   "; ".join(good_fail[:4]))
        if self.a.greedy_under_load == "check":
            self.check("malformed: ... with their lone greedy texts", not differ,
                       "%d differ: %s" % (len(differ), "; ".join(differ[:4])))
        elif differ:
            self.info("NOTE: %d good requests ran batched with others and differ from their lone "
                      "greedy texts (--greedy-under-load info): %s" % (len(differ), "; ".join(differ[:3])))
        ok, detail = self.health_ok()
        r = self.ref("ROMEO:", 8)
        again = self.complete("ROMEO:", 8, temperature=0)
        self.check("malformed: the server still serves, the same text as before",
                   ok and again["text"] == r["text"], detail)
        rss = self.rss_kib()
        base = getattr(self, "rss_after_load", None)
        if rss is not None and base is not None and not self.a.no_rss:
            margin = self.a.rss_margin_mib * 1024
            self.check("malformed: RSS flat after them (within %d MiB of after the load)"
                       % self.a.rss_margin_mib, rss - base <= margin,
                       "%d KiB -> %d KiB (%+d)" % (base, rss, rss - base))

    def g_auth(self):
        if not self.a.api_key:
            self.skip("auth", "no --api-key")
            return
        p = self.comp_payload("ROMEO:", 4)
        for label, auth in (("no Authorization", None), ("a wrong key", "Bearer wrong-" + self.a.api_key),
                            ("not a bearer", "Basic " + self.a.api_key),
                            ("the key without Bearer", self.a.api_key)):
            for method, path, body in (("POST", "/v1/completions", p), ("GET", "/v1/models", None),
                                       ("POST", "/v1/chat/completions",
                                        {"model": self.model, "max_tokens": 4,
                                         "messages": [{"role": "user", "content": "Hi"}]}),
                                       ("POST", "/tokenize", {"content": "Hi"})):
                r = self.http.request(method, path, body, auth=auth if auth else False)
                self.check("auth: %s, %s %s: 401 with an error object" % (label, method, path),
                           r.status == 401 and error_object_problem(r) is None,
                           "HTTP %d %s" % (r.status, r.excerpt(120)))
        wrong = openai.OpenAI(base_url=self.a.base_url.rstrip("/") + "/v1", api_key="sk-wrong",
                              timeout=self.a.timeout, max_retries=0)
        try:
            wrong.completions.create(model=self.model, prompt="ROMEO:", max_tokens=4)
            self.check("auth: the openai client with a wrong key: AuthenticationError", False,
                       "it succeeded")
        except openai.AuthenticationError as e:
            self.check("auth: the openai client with a wrong key: AuthenticationError", True,
                       str(e)[:120])
        except openai.OpenAIError as e:
            self.check("auth: the openai client with a wrong key: AuthenticationError", False, repr(e)[:200])
        r = self.complete("ROMEO:", 4, temperature=0)
        self.check("auth: the right key: a completion", bool(r["text"]), repr(r["text"]))
        res = self.http.stream("/v1/completions", self.comp_payload("ROMEO:", 4, stream=True),
                               deadline=time.perf_counter() + self.a.timeout)
        self.check("auth: the right key: a stream", res.status == 200 and res.done,
                   "HTTP %s done %s" % (res.status, res.done))
        for path in ("/health", "/metrics"):
            r = self.http.request("GET", path, auth=False)
            self.info("%s without a key: HTTP %d (either way is fine)" % (path, r.status))

    def g_idle(self):
        """--idle-timeout: a connection that sends nothing, or half a request, is closed
        after about the timeout; the other groups, run on the same server, show that
        requests which wait or generate for longer are not."""
        t = self.a.idle_timeout
        if not t:
            self.info("idle: the server's --idle-timeout not given: left out")
            return
        u = urllib.parse.urlsplit(self.a.base_url)
        half = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        for label, data in (("a connection that sends nothing", b""),
                            ("half a request (headers and part of the body)", half),
                            ("half a header line", b"POST /v1/compl")):
            s = socket.create_connection((u.hostname, u.port), timeout=t + 15)
            t0 = time.perf_counter()
            got, err = b"", None
            try:
                if data:
                    s.sendall(data)
                while True:  # until the server closes (a 4xx before that is fine)
                    b = s.recv(4096)
                    if not b:
                        break
                    got += b
            except OSError as e:  # a reset is a close too; a timeout is not
                err = e
            finally:
                s.close()
            dt = time.perf_counter() - t0
            closed = err is None or not isinstance(err, socket.timeout)
            self.check("idle: %s is closed after about --idle-timeout %g s" % (label, t),
                       closed and t - 0.5 <= dt <= t + 10,
                       "after %.1f s%s%s" % (dt, ", %r" % got[:40] if got else "",
                                             ", %s" % type(err).__name__ if err else ""))
        # requests that wait in the queue and generate for longer than the timeout,
        # streamed (quiet until their first token) and not (quiet until the end)
        n = self.a.queue_burst * 20
        results = [None] * n
        t0 = time.perf_counter()

        def worker(i):
            p = self.comp_payload(NAMES[i % len(NAMES)] + ":", 200, stream=i % 2 == 0)
            if i % 2 == 0:
                res = self.http.stream("/v1/completions", p, timeout=t + 240,
                                       deadline=time.perf_counter() + 240)
                results[i] = (res.status == 200 and res.done, time.perf_counter() - t0)
            else:
                r = self.http.request("POST", "/v1/completions", p, timeout=t + 240)
                results[i] = (r.status == 200, time.perf_counter() - t0)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for th in threads:
            th.start()
        # generous client limits: under ASan on 2 cores the burst's last replies
        # came after 62 s (CI, 2026-12-06), and the client, not the server, gave up
        for th in threads:
            th.join(300)
        done = sum(1 for r in results if r and r[0])
        longest = max((r[1] for r in results if r), default=0.0)
        self.check("idle: %d requests (half streamed) that take up to %.1f s, beyond the %g s "
                   "timeout, all answered in full" % (n, longest, t), done == n,
                   "%d of %d" % (done, n))
        if longest <= t:
            self.info("idle: the burst ended within the timeout (%.1f s): it shows nothing "
                      "about long requests" % longest)

    def g_queue(self):
        n = self.a.queue_burst
        max_tokens = max(32, (self.a.ctx or 256) - 16)
        results = [None] * n
        gate = threading.Event()
        got_status = [threading.Event() for _ in range(n)]
        release = threading.Event()
        probe = {}
        probe_lock = threading.Lock()
        deadline = time.perf_counter() + 60

        def openai_probe():
            # sent the moment a 429 is seen: the queue is full then, so the
            # openai client must get one too, as RateLimitError. Every 429
            # sends one: a fast model may finish the accepted requests before
            # one probe arrives, so one RateLimitError among them is the pass
            try:
                self.client.completions.create(model=self.model, prompt="ROMEO:", max_tokens=4)
                r = "it succeeded"
            except openai.RateLimitError as e:
                r = True
                with probe_lock:
                    probe["msg"] = str(e)[:120]
            except openai.OpenAIError as e:
                r = repr(e)[:200]
            with probe_lock:
                if probe.get("r") is not True:
                    probe["r"] = r

        def one(i):
            gate.wait(10)

            def on_status(res):
                got_status[i].set()
                if res.status == 429:
                    openai_probe()

            def on_ev(res):
                return not release.is_set()  # leave once every status is in
            payload = self.comp_payload("ROMEO:", max_tokens, stream=True, temperature=0.8, seed=i)
            results[i] = self.http.stream("/v1/completions", payload, timeout=30, deadline=deadline,
                                          on_event=on_ev, on_status=on_status)
            got_status[i].set()
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        gate.set()
        t0 = time.perf_counter()
        for ev in got_status:
            ev.wait(max(0.1, t0 + 20 - time.perf_counter()))
        statuses = [r.status if r else None for r in results]
        release.set()  # the accepted ones leave at their next event
        for t in threads:
            t.join(max(0.1, deadline - time.perf_counter()))
        statuses = [r.status if r else s for r, s in zip(results, statuses)]
        rej = [r for r in results if r is not None and r.status == 429]
        acc = [s for s in statuses if s == 200]
        self.check("queue: a burst of %d slow requests at --parallel 1 --queue 1: some get 429" % n,
                   len(rej) >= 1, "statuses %r" % statuses)
        ra = [r.headers.get("retry-after") for r in rej]
        self.check("queue: every 429 has Retry-After (seconds) and an error object",
                   rej and all(re.fullmatch(r"\d+", (v or "").strip()) for v in ra)
                   and all(error_object_problem(Resp(r.status, r.headers, r.body)) is None for r in rej),
                   "Retry-After values %r, body %s" % (ra[:4], rej[0].body[:120] if rej else None))
        self.check("queue: at most 2 accepted (1 running + 1 waiting)", len(acc) <= 2,
                   "statuses %r" % statuses)
        self.check("queue: every request got an answer", None not in statuses, "statuses %r" % statuses)
        if rej:
            self.check("queue: the openai client, sent while the queue is full, gets RateLimitError",
                       probe.get("r") is True, probe.get("msg") or str(probe.get("r")))
        # the accepted ones left mid-stream: their slots come back
        t1 = time.perf_counter()
        ok, last = False, None
        while time.perf_counter() - t1 < 15:
            try:
                self.complete("ROMEO:", 2, temperature=0)
                ok = True
                break
            except openai.RateLimitError as e:
                last = e
                time.sleep(0.3)
        self.check("queue: a request succeeds once the burst's clients have left", ok,
                   "%.1f s%s" % (time.perf_counter() - t1, "" if ok else ", last: %s" % last))

    # ------------------------------------------------------------ driver

    def discover_model(self):
        r = self.http.request("GET", "/v1/models", timeout=15)
        j = r.json()
        if r.status == 200 and isinstance(j, dict) and j.get("data"):
            self.model = j["data"][0].get("id")
        if not self.model:
            raise RuntimeError("GET /v1/models gave no model id: HTTP %d %s" % (r.status, r.excerpt()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True, help="http://HOST:PORT of the server")
    ap.add_argument("--model-path", default=None,
                    help="the model the server was started with (for headroom run -m); "
                         "none: the embedded model")
    ap.add_argument("--headroom", default=None, help="the headroom binary, for the comparisons")
    ap.add_argument("--run-args", default="--device cpu",
                    help="extra options for headroom run and chat (default: --device cpu)")
    ap.add_argument("--pid", type=int, default=None, help="the server's pid (RSS from /proc)")
    ap.add_argument("--ctx", type=int, default=0, help="the server's --ctx")
    ap.add_argument("--chat-template", choices=["yes", "no"], default="no",
                    help="whether the model has a chat template (no: chat must be a 400)")
    ap.add_argument("--checks", default=",".join(ALL_GROUPS), help="groups to run, comma-separated")
    ap.add_argument("--skip", default="", help="groups to leave out")
    ap.add_argument("--api-key", default=None, help="the server's --api-key")
    ap.add_argument("--idle-timeout", type=float, default=0, help="the server's --idle-timeout")
    ap.add_argument("--timeout", type=float, default=30, help="seconds for one request (default 30)")
    ap.add_argument("--deadline", type=float, default=300,
                    help="seconds for the whole run, then fail (default 300)")
    ap.add_argument("--load-clients", type=int, default=256)
    ap.add_argument("--load-max-tokens", type=int, default=8)
    ap.add_argument("--load-timeout", type=float, default=120, help="seconds for one load wave")
    ap.add_argument("--malformed", type=int, default=100)
    ap.add_argument("--queue-burst", type=int, default=8)
    ap.add_argument("--greedy-under-load", choices=["check", "info"], default="check",
                    help="malformed: whether good requests run among others must give their lone "
                         "greedy texts (check) or only complete (info: a model whose batched "
                         "kernels round differently from one row's)")
    ap.add_argument("--rss-margin-mib", type=int, default=8,
                    help="how much VmRSS may grow across the second load wave (default 8)")
    ap.add_argument("--no-rss", action="store_true",
                    help="report RSS but do not check it (AddressSanitizer's quarantine grows)")
    a = ap.parse_args()
    groups = [g for g in a.checks.split(",") if g]
    skip = {g for g in a.skip.split(",") if g}
    unknown = [g for g in groups + list(skip) if g not in ALL_GROUPS + EXTRA_GROUPS]
    if unknown:
        ap.error("unknown check groups: %s (known: %s)" % (", ".join(unknown),
                                                            ", ".join(ALL_GROUPS + EXTRA_GROUPS)))
    groups = [g for g in groups if g not in skip]

    h = Harness(a)

    def watchdog():
        print("FAIL watchdog: the checks took longer than --deadline %d s (a hung request?)"
              % a.deadline, flush=True)
        print("%d passed, %d failed" % (h.passed, h.failed + 1), flush=True)
        os._exit(1)
    wd = threading.Timer(a.deadline, watchdog)
    wd.daemon = True
    wd.start()
    try:
        h.discover_model()
    except (RuntimeError, OSError, http.client.HTTPException) as e:
        h.check("server reachable: GET /v1/models", False, str(e))
        print("%d passed, %d failed" % (h.passed, h.failed), flush=True)
        return 1
    print("     server %s, model %r, checks: %s" % (a.base_url, h.model, ",".join(groups)), flush=True)
    for gi, g in enumerate(groups):
        t0 = time.perf_counter()
        try:
            getattr(h, "g_" + g)()
        except Exception as e:  # noqa: BLE001 (a group that throws fails, the others still run)
            tb = traceback.extract_tb(e.__traceback__)
            where = "line %d" % tb[-1].lineno if tb else ""
            h.check("%s: ran to the end" % g, False, "%s: %s (%s)" % (type(e).__name__, str(e)[:300],
                                                                      where))
            # a server that stopped answering fails the rest at once instead
            # of making every later request wait for its timeout
            alive, why = h.alive()
            if not alive:
                h.check("server still answering after %s" % g, False,
                        "%s; not run: %s" % (why, ",".join(groups[gi + 1:]) or "nothing"))
                break
        print("     (%s: %.1f s)" % (g, time.perf_counter() - t0), flush=True)
    wd.cancel()
    print("%d passed, %d failed" % (h.passed, h.failed), flush=True)
    return 1 if h.failed else 0


if __name__ == "__main__":
    sys.exit(main())
