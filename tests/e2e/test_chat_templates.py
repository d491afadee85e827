"""Chat templates: the Qwen3 and Llama-3 templates from ../shared render byte-identical to Debian's python3-jinja2.
jinja2 is configured as Hugging Face's apply_chat_template configures it: trim_blocks, lstrip_blocks, loopcontrols,
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now. The conversations have system prompts, several
turns, tool definitions, tool calls and results, reasoning, Unicode, and the generation prompt on and off. A set of
feature templates exercises the rest of the Jinja subset the same way."""
import json
import os
import subprocess
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from common import ASCENT, SHARED, check, finish, no_sanitizer_report, run, tmpdir

D = tmpdir()


def hf_env():
    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
    return env


def reference(config, context):
    cfg = json.load(open(config))
    tok = lambda t: t if isinstance(t, str) or t is None else t.get("content")
    ctx = {"bos_token": tok(cfg.get("bos_token")) or "", "eos_token": tok(cfg.get("eos_token")) or "",
           "add_generation_prompt": False}
    ctx.update(context)
    return hf_env().from_string(cfg["chat_template"]).render(**ctx)


def ours(config, context, name):
    path = os.path.join(D, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(context, f, ensure_ascii=False)
    # Bytes, decoded here: output that is not UTF-8 (a string cut inside a character) is then a difference this test
    # reports, not an exception in the harness.
    r = subprocess.run([ASCENT, "chat-template", "--config", config, "--context", path], capture_output=True, timeout=600)
    no_sanitizer_report(r, f"chat-template {name}")
    out = (r.stdout if r.returncode == 0 else r.stderr).decode("utf-8", "surrogateescape")
    return out if r.returncode == 0 else "ERROR: " + out


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                             "parameters": {"type": "object", "properties": {
                                                 "city": {"type": "string", "description": "City name"},
                                                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                                 "required": ["city"]}}}
SEARCH = {"type": "function", "function": {"name": "search", "description": "Web search, \"quoted\" & <tagged>",
                                            "parameters": {"type": "object", "properties": {
                                                "q": {"type": "string"}, "top_k": {"type": "integer", "default": 3}}}}}

CONVERSATIONS = {
    "single_user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {"messages": [{"role": "system", "content": "You are terse."},
                                 {"role": "user", "content": "What is 2+2?"}], "add_generation_prompt": True},
    "multi_turn": {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                                {"role": "assistant", "content": "Hello! How can I help?"},
                                {"role": "user", "content": "Tell me a joke.\nA short one."}],
                   "add_generation_prompt": True},
    "multi_turn_no_prompt": {"messages": [{"role": "user", "content": "  padded  "},
                                          {"role": "assistant", "content": "ok"}], "add_generation_prompt": False},
    "unicode": {"messages": [{"role": "user", "content": "Ünïcödé — 你好 🦙 \t tabs"}], "add_generation_prompt": True},
    "tools_defined": {"messages": [{"role": "system", "content": "Use tools."},
                                   {"role": "user", "content": "Weather in Paris?"}],
                      "tools": [WEATHER, SEARCH], "add_generation_prompt": True},
    "tool_call_and_result": {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                                                          "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21°C in Paris."}], "tools": [WEATHER]},
    "parallel_tool_calls": {"messages": [
        {"role": "user", "content": "Compare Paris and Rome"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "20"}, {"role": "tool", "content": "25"}],
        "tools": [WEATHER], "add_generation_prompt": True},
    "reasoning_field": {"messages": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Because.", "reasoning_content": "Thinking it through."},
        {"role": "user", "content": "And then?"}], "add_generation_prompt": True},
    "think_in_content": {"messages": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nstep one\n</think>\n\nAnswer one"}], "add_generation_prompt": False},
    "thinking_disabled": {"messages": [{"role": "user", "content": "Quick"}], "add_generation_prompt": True,
                          "enable_thinking": False},
    "tool_response_in_user": {"messages": [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": "calling", "tool_calls": [{"name": "search", "arguments": {"q": "x"}}]},
        {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\ndone"}]},
}

# Feature templates: each exercises part of the Jinja subset beyond what the two model templates use.
FEATURES = {
    "macro_and_filters": "{% macro fmt(m, sep=': ') %}{{ m.role|upper }}{{ sep }}{{ m.content|trim }}{% endmacro %}"
                         "{% for m in messages %}{{ fmt(m) }}|{{ fmt(m, sep='=') }}\n{% endfor %}"
                         "{{ messages|length }} {{ messages|map(attribute='role')|join(',') }}"
                         " {{ (messages|selectattr('role', 'equalto', 'user')|list)|length }}",
    # An inner loop that never names `loop` runs without one (jinja_ast.h, needs_loop); the outer loop's is still
    # what its body reads after it, and an inner loop that names it reads its own.
    "nested loops": "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ b }}{% endfor %}{{ loop.index }}"
                    "{% for c in [5] %}{{ loop.index0 }}{{ c }}{% endfor %}{{ loop.last }};{% endfor %}",
    "loops": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }}"
             "{% if loop.first %}F{% endif %}{% if m.content == 'stop' %}{% break %}{% endif %}{% endfor %}"
             "{% for x in [] %}x{% else %}empty{% endfor %}{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}"
             "{{ k }}={{ v }};{% endfor %}{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}"
             "{% endfor %}",
    "expressions": "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 'a' ~ 1 ~ none }}"
                   " {{ [1, 2] + [3] }} {{ {'k': 'v'} }} {{ 'x' * 3 }} {{ 'abc'[::-1] }} {{ 'abcdef'[1:4] }}"
                   " {{ [1,2,3,4][-2:] }} {{ 'a,b,,c'.split(',') }} {{ 'a b  c'.split() }} {{ ' x '.strip() }}"
                   " {{ 'Hello'.startswith('He') and not 'Hello'.endswith('x') }} {{ 3 in [1, 2, 3] }}"
                   " {{ 'z' not in 'abc' }} {{ 1 < 2 <= 2 }} {{ true if none else false }} {{ 1.5 + 2 }}"
                   " {{ 'a' == 'a' }} {{ 'a-b'.replace('-', '+') }} {{ 'ab'.upper() }} {{ '%s' }}",
    "tests_and_set": "{% set ns = namespace(n=0, seen=[]) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                     "{% set local = m.role %}{% endfor %}{{ ns.n }} {{ local is defined }} {{ m is undefined }}"
                     " {{ none is none }} {{ 3 is odd }} {{ 4 is even }} {{ 'x' is string }} {{ 3 is number }}"
                     " {{ messages is iterable }} {{ {} is mapping }} {{ false is false }} {{ 9 is divisibleby 3 }}"
                     "{% set block %}captured {{ 1 + 1 }}{% endset %} [{{ block }}]",
    "whitespace_control": "start\n  {%- if true %}\n    inside\n  {%- endif %}\n{% if true %}\n    kept\n{% endif %}\n"
                          "  {{- ' v ' -}}  \nend {# comment #}\n    {% if false %}no{% endif %}\nlast",
    "tojson": "{{ messages|tojson }}\n{{ {'a': [1, 2.5, none, true], 'b': 'é\"\\n'}|tojson(indent=2) }}",
    # jinja2's int and float filters (a default where Python's int()/float() fail), a sign binding before filters
    # (-3|abs is abs(-3)), repetition either way round, steps near int64's limits, and nesting well inside the limits.
    "numbers": "{{ 'abc'|int }} {{ '12abc'|int }} {{ ' 7 '|int }} {{ '+4'|int }} {{ '3.9'|int }} {{ '1e3'|int }}"
               " {{ 3.9|int }} {{ 'x'|int(5) }} {{ none|int }} {{ [1]|int }} {{ 'abc'|float }} {{ ' 2 '|float }}"
               " {{ 'x'|float(1.5) }} {{ -3|abs }} {{ -3|abs + 1 }} {{ -(3)|string }} {{ 3 * 'ab' }} {{ [1, 2] * 2 }}"
               " {{ 2 * [0] }} {{ 'x' * -2 }} {{ 2 ** 62 }} {{ 2 ** -1 }} {{ (-2) ** 3 }} {{ -2 ** 2 }}"
               " {{ 'abcdef'[1::9223372036854775807] }} {{ 'abcdef'[::-9223372036854775807] }}"
               " {{ range(0, 10, 9223372036854775807)|list }} {{ range(5, 0, -2)|list }} {{ range(100000)|length }}"
               " {{ " + "(" * 40 + "1" + ")" * 40 + " }} {{ " + "- " * 40 + "1 }} {{ " + "not " * 41 + "true }}"
               + "{% if true %}" * 40 + "deep" + "{% endif %}" * 40,
    # jinja2's round (Python's round: ties to even on the exact binary value, so 2.675 -> 2.67), its ceil and floor
    # methods, keyword arguments, and int()/float()'s underscores between digits.
    "round": "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1.25|round(1) }} {{ -0.5|round }} {{ 7|round }}"
             " {{ 7|round(1, 'floor') }} {{ 3.14159|round(2, 'ceil') }} {{ 3.14159|round(3, method='floor') }}"
             " {{ -2.5|round(0, 'ceil') }} {{ 1e300|round(2) }} {{ 0.1|round(20) }} {{ 1.5|round|int }}"
             " {{ (10 / 3)|round(precision=4) }} {{ '1_000'|int + 1 }} {{ '1_0.5'|float }} {{ '1__0'|int(7) }}"
             " {{ '_1'|int(8) }} {{ '1_'|float(9.5) }} {{ '1_e5'|float(2.5) }} {{ '1e1_0'|float }}"
             # Python's float repr: fixed for decimal exponents -4..15, else d.ddde+XX
             " {{ 1e15 }} {{ 1e16 }} {{ 1.5e16 }} {{ 0.0001 }} {{ 0.00001 }} {{ 123456789.125 }} {{ -0.0 }}"
             " {{ 1e-300 }} {{ 2.5e-7 }} {{ 1e999 }} {{ 0.1 + 0.2 }} {{ [1e20, 3.0] }}",
    # As jinja2 loads a template: "\r\n" and "\r" become "\n", and one final line end is dropped.
    "line_ends": "a\r\n{{ messages[1].content }}\rb\r\n\n{{ 'x' }}\n",
    # jinja2's default Undefined iterates as nothing and has length 0 (here: an error).
    "undefined_iterates": "{% for t in no_such_list %}x{% endfor %}[{{ nope|length }}|{{ nope|list }}|{{ nope|join(',') }}"
                          "|{{ nope|selectattr('a')|list }}]",
    # jinja2's sort, dictsort, unique, min, max and sum (case-insensitive by default, attribute paths with dots and
    # list indices, several sort attributes, stable under reverse), join's attribute=, and a tag's end only outside
    # brackets ({{ {'k': {'n': 1}}}}).
    "sort_and_aggregate": "{{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(true) }} {{ ['b', 'A', 'a', 'C']|sort }}"
                          " {{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }} {{ [[2, 1], [1, 9], [1, 2]]|sort }}"
                          " {{ messages|sort(attribute='role')|join('/', attribute='content') }}"
                          " {{ messages|sort(attribute='role,content', reverse=true)|join('/', attribute='content') }}"
                          " {{ [{'a': {'b': 2}}, {'a': {'b': 1}}]|sort(attribute='a.b')|map(attribute='a.b')|list }}"
                          " {% for k, v in {'b': 1, 'A': 3, 'c': 2}|dictsort %}{{ k }}{{ v }}{% endfor %}"
                          " {% for k, v in {'b': 1, 'A': 3, 'c': 2}|dictsort(by='value', reverse=true) %}{{ k }}{{ v }}"
                          "{% endfor %} {{ ['a', 'A', 'b', 'a']|unique|list }}"
                          " {{ ['a', 'A', 'b']|unique(case_sensitive=true)|list }}"
                          " {{ [1, 1.0, true, 'a', 'A', none, 2.5]|unique|list }}"
                          " {{ range(100000)|unique|list|length }}"
                          " {{ messages|unique(attribute='role')|map(attribute='content')|list }}"
                          " {{ [3, 1, 2]|min }} {{ [3, 1, 2]|max }} {{ ['b', 'A']|min }} {{ ['b', 'A']|max }}"
                          " {{ messages|max(attribute='content') }} [{{ []|max }}] {{ [1, 2, 3.5]|sum }}"
                          " {{ [true, 2]|sum(start=10) }} {{ messages|map(attribute='content')|map('length')|sum }}"
                          " {{ [[1], [2]]|map(attribute='0')|sum }} {{ ['xy']|map(attribute='1')|list }}"
                          " {{ {'k': {'n': 1}}}}",
    # select/reject by any test (with arguments), selectattr/rejectattr by any test, map by a filter's name or an
    # attribute with a default; their results are generators in jinja2, true even when empty.
    "select_and_map": "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }}"
                      " {{ [0, 1, '', 'x', none]|select|list }} {{ [1, 5, 10]|select('gt', 4)|list }}"
                      " {{ [1, 5, 10]|select('<=', 5)|list }} {{ [1, 5, 10]|reject('in', [5])|list }}"
                      " {{ [6, 7, 9]|select('divisibleby', 3)|list }}"
                      " {{ messages|selectattr('role', 'ne', 'user')|map(attribute='role')|list }}"
                      " {{ messages|rejectattr('role', 'in', ['user', 'system'])|list|length }}"
                      " {{ messages|selectattr('content', 'string')|list|length }}"
                      " {{ messages|map(attribute='missing', default='-')|join }}"
                      " {{ 'T' if messages|selectattr('role', 'equalto', 'nobody') else 'F' }}"
                      " {{ 'T' if [1]|select('none') else 'F' }} {{ 'T' if [] else 'F' }}"
                      " {{ 'T' if []|reverse else 'F' }} {{ 'T' if ''|reverse else 'F' }} {{ 'T' if []|sort else 'F' }}"
                      " {{ ['a', ' b ']|map('trim')|map('upper')|join('+') }} {{ [1.5, 2.5]|map('round')|list }}"
                      " {{ ['1', '2']|map('int')|sum }} {{ [3, 1]|map('string')|join }} {{ 10 is divisibleby(5) }}"
                      " {{ 3 is lt 4 }} {{ 'a' is ne 'b' }} {{ 2 is ge(2) }} {{ [1, 2] < [1, 3] }} {{ [2] > [1, 9] }}",
    # jinja2's indent (width as spaces or a string; first, blank; Python's splitlines) and string literals' escapes
    # as Python's unicode-escape reads them (\x, \u, \U, octal, \a..\v; an unknown one keeps its backslash).
    "indent_and_escapes": r"{{ 'a\nb\n\nc\n'|indent }}|{{ 'a\nb'|indent(2, true) }}"
                          r"|{{ 'a\n\nb'|indent('> ', blank=true) }}|{{ 'x\r\ny\x0bz\x1cw'|indent(1) }}"
                          r"|{{ ''|indent(first=true) }}|{{ 'a\u2028b'|indent(1) }}"
                          r"|{{ {'a': [1, 2]}|tojson(indent=2)|indent(4) }}|{{ '\u00e9\U0001F999\101\7\x41\q\\' }}"
                          r"|{{ messages|map(attribute='content')|join('\n')|indent(2, first=true) }}",
    # Case mapping beyond ASCII (Python's str methods; jinja2's title filter, which is not str.title()), and an
    # attribute a str or list does not have, which is Undefined (it printed "<function>").
    "unicode_case": "{{ 'é ß ǆx 1st hello-WORLD ÉTÉ'|upper }}|{{ 'ÉTÉ Straße'|lower }}"
                    "|{{ 'ǆungla éTé 1st o\\'neil (ab [cD <eF x-y'|title }}|{{ 'ǆungla éTé 1st o\\'neil'.title() }}"
                    "|{{ 'éCOLE ǆx'|capitalize }}|{{ ['b', 'É', 'é', 'a']|sort }}|{{ ['x', 1].content }}"
                    "|{{ 'x'.content }}|{{ messages[1].content.upper() }}|{{ 'ßa-ßb straße'|title }}"
                    "|{{ 'ßa xß'.title() }}|{{ 'ßa'|capitalize }}",
    # Tuples: (a, b) literals, items() and dictsort pairs print as Python's, equal no list, add only to a tuple,
    # slice, repeat, sort and hash (unique) as tuples.
    "tuples": "{{ (1, 2) }} {{ (1,) }} {{ (1, 2) == [1, 2] }} {{ (1, 2) + (3,) }} {{ {'a': 1}.items()|list }}"
              " {{ {'b': 1, 'a': 2}|dictsort }} {{ (1, 2)[1:] }} {{ (1, 'x') * 2 }}"
              " {{ [(1, 2), (1, 2), (2, 1)]|unique|list }}"
              " {{ [(2, 1), (1, 2)]|sort }} {{ {'a': 1}|items|list }} {{ (1, 2)|tojson }} {{ (1, 2) < (1, 3) }}"
              " {{ 1 in (1, 2) }} {{ (1, 2)|list }} {{ messages[0]|dictsort }}",
    # Python's printf-style formatting: the % operator on strings and jinja2's format filter.
    # Python's str.replace: an empty old string matches before every character and at the end; count.
    # tojson's negative indent writes line ends only, as json.dumps does; |length of a string counts code points.
    "tojson_indent_and_length": "{{ [1, [2]]|tojson(indent=-1) }} {{ [1]|tojson(indent=0) }} {{ ('é' * 1000)|length }}"
                                " {{ (range(1000)|list)|tojson(indent=3)|length }}",
    "replace": "{{ 'ab'.replace('', '-') }} {{ 'éa'|replace('', '-') }} {{ 'aaa'.replace('a', 'b', 2) }}"
               " {{ 'aaa'|replace('a', 'b', 2) }} {{ ''.replace('', 'x') }} {{ 'ab'.replace('', '-', 1) }}"
               " {{ 'aaa'.replace('a', 'b', -1) }} {{ 'aaa'.replace('a', 'b', 0) }} {{ 'a.b.c'|replace('.', '::') }}",
    "percent_format": "{{ '%s|%r|%5s|%-5s|%.2s' % ('ab', 'ab', 'ab', 'ab', 'abc') }}"
                      " {{ '%d %i %5d %-5d| %05d %+d % d %x %X %#x %#o %o %.3d'"
                      " % (3.7, -4, 42, 42, -42, 5, 5, 255, 255, 255, 8, 8, 7) }}"
                      " {{ '%f %.2f %10.3f %-10.1f| %e %E %g %G %+.1f %05.1f'"
                      " % (3.14159, 2.5, 1.5, 2.25, 12345.678, 0.00012, 1e20, 1e-5, 2.0, -1.5) }}"
                      " {{ '%(a)s and %(b)05d' % {'a': 'x', 'b': 7} }} {{ '%c%c %%' % (65, 'é') }}"
                      " {{ '%s' % [1, 2] }} {{ '%s' % (1,) }} {{ '%s'|format('x') }} {{ '%s-%s'|format(1, 2) }}"
                      " {{ '%(k)s'|format(k='v') }} {{ '%*d|%-*d|%.*f' % (5, 1, 5, 2, 2, 3.14) }} {{ '%s' % none }}"
                      " {{ '%d' % true }} {{ '%5s|' % 'é' }} {{ '%x' % -255 }} {{ '%.0f %.0f' % (0.5, 1.5) }}"
                      " {{ '<|im_start|>%s\\n' % messages[1].role }} {{ '%.1s|%.2s|%5.1s|' % ('é', 'aéb', 'éé') }}",
    # jinja2's groupby ((grouper, list) tuples, case-insensitive by default with the first item's own case; an index or
    # none as the attribute), batch, slice, truncate (HF's leeway 5), center, wordcount, urlencode, filesizeformat and
    # attr (attributes only, never keys).
    "groupby_batch_slice": "{% for g in messages|groupby('role') %}{{ g.grouper }}:{{ g.list|map(attribute='content')"
                           "|join(',') }};{% endfor %}{% for role, items in messages|groupby('role') %}{{ role }}="
                           "{{ items|length }};{% endfor %}{{ messages|groupby('role')|length }}"
                           " {{ [{'a': 'X'}, {'a': 'x'}, {'a': 'y'}, {'b': 1}]|groupby('a', default='z') }}"
                           " {{ [{'a': 'X'}, {'a': 'x'}]|groupby('a', case_sensitive=true) }}"
                           " {{ [[1, 'a'], [0, 'b'], [1, 'c']]|groupby(0) }} {{ 'abca'|groupby(-1) }}"
                           " {{ 'bab'|groupby(none) }} {{ []|groupby('a') }}"
                           " {{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3, 4, 5]|batch(2, 'x')|list }}"
                           " {{ 'abcd'|batch(3)|list }} {{ [1, 2, 3]|batch(0)|list }} {{ [1, 2, 3]|batch(-1)|list }}"
                           " {{ [1, 2, 3, 4, 5, 6, 7]|slice(3)|list }} {{ [1, 2, 3, 4, 5, 6, 7]|slice(3, 0)|list }}"
                           " {{ [1]|slice(3, 'f')|list }} {{ [1, 2]|slice(-3)|list }}",
    "truncate_center_and_more": "{{ 'foo bar baz qux'|truncate(9) }}|{{ 'foo bar baz qux'|truncate(9, True) }}"
                                "|{{ 'foo bar baz qux'|truncate(11, False, '!', 0) }}|{{ 'foo bar'|truncate(5) }}"
                                "|{{ 'foo bar'|truncate(5, leeway=0) }}|{{ 'ééééééééé éé'|truncate(6, leeway=0) }}"
                                "|{{ ('x' * 300)|truncate }}|{{ 'a'|truncate(9223372036854775807) }}"
                                "|{{ 'ab cd'|truncate(3, leeway=9223372036854775807) }}"
                                "|[{{ 'ab'|center(7) }}][{{ 'abc'|center(8) }}][{{ 'ab'|center(8) }}][{{ 'é'|center(4) }}]"
                                "[{{ 'abc'|center(2) }}][{{ 5|center(5) }}][{{ 'ab'|center(-9223372036854775807) }}]"
                                " {{ 'Hello wörld, foo_bar 42 x-y 3.5 ½ ٣ é'|wordcount }} {{ '  '|wordcount }}"
                                " {{ 'a b/c?d=é&f~g.h-i_j'|urlencode }} {{ {'a b': 'c/d', 'x': 1}|urlencode }}"
                                " {{ [('k', 'v w'), ['a', 'é']]|urlencode }} {{ 42|urlencode }}"
                                " {{ 0|filesizeformat }}|{{ 1|filesizeformat }}|{{ 999|filesizeformat }}"
                                "|{{ 1000|filesizeformat }}|{{ 1024|filesizeformat(true) }}|{{ 123456789|filesizeformat }}"
                                "|{{ 123456789|filesizeformat(binary=true) }}|{{ 1e30|filesizeformat }}"
                                "|{{ -1e20|filesizeformat }}|{{ '2048'|filesizeformat }}|{{ -0.5|filesizeformat }}"
                                " {{ messages[0]|attr('role') }}|{{ messages[0]|attr('items') is defined }}"
                                "|{{ 'abc'|attr('upper') is defined }}|{{ [1]|attr('append') is defined }}"
                                "|{% set ns = namespace(a=3) %}{{ ns|attr('a') }}",
    # Strings index and slice by characters. strip, trim and split take Python's whitespace (U+00A0, U+3000, ...) and
    # whole characters, not bytes.
    "unicode_strings": "[{{ 'ÉtÉ'[0:3:2] }}][{{ 'aé'[1] }}][{{ 'ÉtÉ'[0:2] }}][{{ 'aéb日'[-2] }}][{{ 'aéb日'[::-1] }}]"
                       "[{{ 'aéb日'[-1:-5:-2] }}][{{ '日本語テキスト'[2:5] }}][{{ '日本語テキスト'[::-3] }}]"
                       "[{{ messages[1].content[0] }}][{{ ' hi\u00a0'.strip() }}][{{ '\u3000hi\u3000'|trim }}]"
                       "[{{ 'a\u2003b c'.split() }}][{{ '\x1chi\x85'.strip() }}][{{ '\u200bhi'.strip() }}]"
                       "[{{ 'a b c  '.split(none, 1) }}][{{ '  a b'.split(none, 0) }}][{{ 'éaè'.strip('é') }}]"
                       "[{{ '日本語日'.strip('日') }}][{{ 'xax'|trim('x') }}][{{ ' a\u3000'.rstrip() }}]",
    # find/rfind/index/rindex/count take start and end and give positions in characters; ljust, rjust, center, zfill.
    "string_search_and_padding": "[{{ 'éa'.find('a') }}][{{ 'ééa'.find('a', 2) }}][{{ 'ééa'.count('é', 1) }}]"
                                 "[{{ 'éaéa'.rfind('a') }}][{{ 'éa'.index('a') }}][{{ 'éaéa'.rindex('é') }}]"
                                 "[{{ 'ab'.find('', 2) }}][{{ 'ab'.find('', 3) }}][{{ 'abc'.find('', 2, 1) }}]"
                                 "[{{ 'abc'.rfind('') }}][{{ 'abc'.count('') }}][{{ 'abc'.count('', 1, 2) }}]"
                                 "[{{ 'abc'.count('', 5) }}][{{ 'aaaa'.count('aa') }}][{{ 'héllo'.find('l', -3) }}]"
                                 "[{{ 'héllo'.find('l', none, 2) }}][{{ 'héllo'.rfind('l', 0, -1) }}][{{ 'é'.ljust(3) }}]"
                                 "[{{ 'é'.rjust(3, '·') }}][{{ 'é'.center(4, '*') }}][{{ '-5'.zfill(4) }}]"
                                 "[{{ 'abc'.zfill(2) }}][{{ 'ab'.center(5) }}]",
    # str predicates (isalpha, isdecimal, isalnum, isspace and isascii over Unicode; the rest over ASCII), and a list's
    # or tuple's count and index (a tuple has no other method).
    "predicates_and_counts": "[{{ 'abc'.isalpha() }}{{ 'ab1'.isalpha() }}{{ ''.isalpha() }}{{ 'éü'.isalpha() }}"
                             "{{ '日本'.isalpha() }}][{{ '123'.isdecimal() }}{{ '١٢٣'.isdecimal() }}{{ '1.5'.isdecimal() }}]"
                             "[{{ 'a1'.isalnum() }}{{ 'é½'.isalnum() }}{{ 'a b'.isalnum() }}][{{ ' \t\n'.isspace() }}"
                             "{{ '\u3000\u00a0'.isspace() }}{{ ''.isspace() }}][{{ 'é'.isascii() }}{{ ''.isascii() }}]"
                             "[{{ '123'.isdigit() }}{{ '12a'.isnumeric() }}][{{ 'abc'.islower() }}{{ 'aBc'.islower() }}"
                             "{{ '123'.islower() }}][{{ 'A1'.isupper() }}][{{ 'Hello World'.istitle() }}"
                             "{{ 'HEllo'.istitle() }}{{ \"O'Neil\".istitle() }}][{{ [1, 2, 1].count(1) }}]"
                             "[{{ [1, 2, 1].index(1, 1) }}][{{ (1, 2).count(1) }}][{{ (1, 2).index(2) }}]"
                             "[{{ (1, 2).append is defined }}][{{ [1, 2, 3].index(3, -1) }}]"
                             "[{{ 'abc' is lower }}{{ 5 is lower }}{{ 'ABC' is upper }}{{ none is upper }}]"
                             "[{{ 'trim' is filter }}{{ 'striptags' is filter }}{{ 'nope' is filter }}{{ 5 is filter }}]"
                             "[{{ 'odd' is test }}{{ 'filter' is test }}{{ 'trim' is test }}]"
                             "[{{ messages|selectattr('role', 'lower')|list|length }}]",
    # escape HTML-escapes (it returned its value before), never twice; safe and escape give Markup, shown as such
    # inside a printed list; forceescape; the escaped test.
    "escape_and_markup": "[{{ '<b>\"x\" & \\'y\\''|e }}][{{ '<b>'|escape }}][{{ '<b>'|safe }}][{{ 5|e }}]"
                         "[{{ ('<a>'|e) ~ '<c>' }}][{{ ('<a>'|e)|length }}][{{ '<a>'|e|e }}][{{ ['<a>']|e }}]"
                         "[{{ none|e }}][{{ 'a'|e is escaped }}{{ 'a' is escaped }}{{ ('a'|e ~ 'b') is escaped }}]"
                         "[{{ ['<a>'|e, '<b>'|safe, 'c'] }}][{{ '<a>'|safe|e }}][{{ '<a>'|safe|forceescape }}]"
                         "[{{ [1]|safe|length }}][{{ ('<a>'|e)|tojson }}]{% set x = '<i>'|e %}[{{ x|e }}]",
    # Python's bools are integers (abs, round, unary signs, repetition, the number test). HF's tojson binds
    # ensure_ascii, indent, separators and sort_keys in that order. A namespace prints as jinja2's Namespace and has
    # only its attributes. Empty sequences repeat at once however many times.
    "bools_tojson_namespace": r"{{ true|abs }} {{ false|abs }} {{ true|round }} {{ -true }} {{ +false }}"
                              r" {{ true is number }} {{ 'ab' * true }} {{ false * [1] }}"
                              r" {{ {'b': 'é', 'a': [1, '\U0001F999\x7f']}|tojson(true) }} {{ 'é'|tojson(2) }}"
                              r" {{ {'b': 1, 'a': {'d': 2, 'c': 3}}|tojson(sort_keys=true) }}"
                              r" {{ [1, {'a': 2}]|tojson(indent=2, separators=(',', ' = ')) }}"
                              r" {{ [1, [2]]|tojson(false, '\t') }} {{ [1]|tojson(none, -2) }}"
                              r"{% set ns = namespace(a=1, b='x') %} {{ ns }} {{ [ns] }} {{ ns is mapping }}"
                              r" {{ ns.items is defined }} {{ ns is iterable }}"
                              r" {{ ('' * 9223372036854775807)|length }} {{ ([] * 9223372036854775807)|length }}",
    # Python's float % and // (CPython's divmod), % formatting of ascii(), of inf and nan under the 0 flag and of an
    # argument that can be subscripted, and repr's escapes for what is not printable.
    "arithmetic_and_formatting": r"{{ 1e308 % 3 }} {{ -7 % 2.5 }} {{ 7 % -0.5 }} {{ 0.0 % -7 }}"
                                 r" {{ 9223372036854775807 % 2.5 }} {{ 1e308 // 3 }} {{ -7.5 // 2 }} {{ 7 // -0.5 }}"
                                 r" {{ 1 // 0.1 }} {{ 1 % 0.1 }} {{ 3 % (-9223372036854775807 - 1) }}"
                                 r" {{ -3 % (-9223372036854775807 - 1) }} {{ 3 // (-9223372036854775807 - 1) }}"
                                 r" {{ (-9223372036854775807 - 1) % 3 }} {{ (-9223372036854775807 - 1) // 3 }}"
                                 r" {{ '%a|%5.1f|%05.1f|% 08.3f|%-6f|%05f'"
                                 r" % ('é', 1e400, 1e400, -1e400, 1e400, 1e400 - 1e400) }}"
                                 r" {{ '%a' % ['ü\u3000'] }} {{ 'ab' % [1] }}{{ 'ab' % {} }}{{ 'ab' % nope }}"
                                 r""" {{ '%s' % {'a': 1} }} {{ ['a\tb', 'c\u00a0d', '\x01', 'é', '\u2028', "'"] }}""",
    # Undefined as a container (in), slices of what cannot be sliced (Undefined in jinja2), lists whose equal items
    # have no order, unpacking any iterable, str and dict methods' optional arguments, and filters' named arguments.
    "containers_and_methods": r"{{ 1 in nope }} {{ 'a' not in nope }} [{{ none[1:] }}|{{ 5[::2] }}|{{ {'a': 1}[1:] }}]"
                              r" {{ [{'a': 1}, 2] < [{'a': 1}, 3] }} {{ messages < messages }} {{ messages <= messages }}"
                              r" {% for k, v in {'ab': 1, 'cd': 2} %}{{ v }}{{ k }};{% endfor %}"
                              r"{% for a, b in ['xy'] %}{{ b }}{{ a }}{% endfor %}"
                              r" {{ 'abc'.startswith('b', 1) }} {{ 'abc'.endswith('b', 0, 2) }}"
                              r" {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.startswith('', 4) }}"
                              r" {{ 'abc'.startswith('', 3) }} {{ 'abc'.endswith('c', -1) }}"
                              r" {{ 'abc'.endswith(('b', 'c'), none, -1) }} {{ {'a': 1}.get(5, '*') }}"
                              r" {{ nope is iterable }} {{ nope is sequence }} {{ nope is callable }}"
                              r" {{ 'a-b'|replace('-', 1) }} {{ 5|replace(5, 'five') }} {{ 3.7|int(default=1) }}"
                              r" {{ 'x'|float(default=2.5) }} {{ none|default('d', boolean=true) }}"
                              r" [{{ ' xay '|trim(chars=' y') }}] {{ nope|items|list }} {{ 'T' if {}|items else 'F' }}",
}
FEATURE_CONTEXT = {"messages": [{"role": "system", "content": " sys "}, {"role": "user", "content": "hi"},
                                {"role": "assistant", "content": "stop"}, {"role": "user", "content": "more"}]}


def main():
    for model in ("qwen3", "llama3"):
        config = os.path.join(SHARED, "tokenizers", model, "tokenizer_config.json")
        same = 0
        for name, ctx in CONVERSATIONS.items():
            try:
                want = reference(config, ctx)
            except jinja2.exceptions.TemplateError as e:
                want = None
                print(f"  reference raised for {name}: {e}")
            got = ours(config, ctx, f"{model}-{name}")
            if got == want:
                same += 1
            else:
                print(f"  {model}/{name}:\n    want {want!r}\n    got  {got!r}")
        check(same == len(CONVERSATIONS), f"{model}: {same}/{len(CONVERSATIONS)} conversations byte-identical to jinja2")
    for name, source in FEATURES.items():
        config = os.path.join(D, f"feature-{name}.json")
        json.dump({"chat_template": source, "bos_token": "<s>"}, open(config, "w"))
        want = reference(config, FEATURE_CONTEXT)
        got = ours(config, FEATURE_CONTEXT, name)
        check(got == want, f"feature template {name}" + ("" if got == want else f"\n    want {want!r}\n    got  {got!r}"))
    # HF's strftime_now (datetime.now().strftime, local time), as jinja2 renders it just before or just after.
    config = os.path.join(D, "strftime-template.json")
    json.dump({"chat_template": "{{ strftime_now('%Y-%m-%d %A %b %j %%') }}|{{ strftime_now('') }}|"
                                "{% if strftime_now is defined %}{{ strftime_now('%d %b %Y') }}{% endif %}"},
              open(config, "w"))
    before = reference(config, FEATURE_CONTEXT)
    got = ours(config, FEATURE_CONTEXT, "strftime")
    after = reference(config, FEATURE_CONTEXT)
    check(got in (before, after), f"strftime_now renders today's date as jinja2 does: {got!r} ({before!r})")
    # raise_exception and template errors surface as one-line errors.
    config = os.path.join(D, "raise.json")
    json.dump({"chat_template": "{% if messages|length > 1 %}{{ raise_exception('only one message') }}{% endif %}"},
              open(config, "w"))
    path = os.path.join(D, "two.json")
    json.dump(CONVERSATIONS["multi_turn"], open(path, "w"))
    r = run(["chat-template", "--config", config, "--context", path])
    check(r.returncode == 1 and "only one message" in r.stderr, f"raise_exception reaches the user: {r.stderr.strip()}")
    # What a model's template cannot make the renderer do. Each is one line naming the template's file, exit 1, rather
    # than a stack overflow, a hang, running out of memory or undefined behaviour. (jinja2 itself stops the first three
    # with RecursionError, "too many levels of indentation" and its sandbox's range limit.)
    for what, source, needle in [
            ("150 nested parentheses", "{{ " + "(" * 150 + "1" + ")" * 150 + " }}", "nested more than 100 levels deep"),
            ("150 nested ifs", "{% if true %}" * 150 + "x" + "{% endif %}" * 150, "nested more than 100 levels deep"),
            ("a macro calling itself", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
             "rendering nested more than 200 levels deep"),
            ("range(10**9)", "{% for i in range(1000000000) %}{% endfor %}", "more than 100000 items"),
            ("'x' * 10**9", "{{ 'x' * 1000000000 }}", "repeating 1 items 1000000000 times"),
            # Each step within the repetition limit, but doubled 40 times: a terabyte asked for (std::bad_alloc, or
            # the machine's memory, before).
            ("a string doubled by ~ in a loop", "{% set ns = namespace(s='x') %}{% for i in range(40) %}"
             "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "~ makes more than 268435456 bytes"),
            ("a list doubled by + in a loop", "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}"
             "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", "+ makes more than 268435456 bytes"),
            ("a list of large strings repeated", "{{ (['x' * 100000000] * 100)|length }}",
             "repeating 1 items 100 times makes more than 268435456 bytes"),
            ("replace growing a string 10**5 times", "{{ ('x' * 100000)|replace('x', 'y' * 100000)|length }}",
             "replace makes more than 268435456 bytes"),
            # A method called without its argument dereferenced a null pointer (SIGSEGV, exit 139).
            ("join() without its argument", "{{ ','.join() }}", "join() needs at least 1 argument(s), got 0"),
            ("startswith() without its argument", "{{ 'a'.startswith() }}", "startswith() needs at least 1 argument"),
            ("get() without its argument", "{{ {'a': 1}.get() }}", "get() needs at least 1 argument"),
            ("batch filling 2^63 items", "{{ ([1]|batch(9223372036854775807, 'x'))|list }}",
             "batch filled up to 9223372036854775807 items, past 100000"),
            ("slice into 2^63 parts", "{{ ([1]|slice(9223372036854775807))|list }}",
             "slice into 9223372036854775807 parts, past 100000"),
            ("center to 2^63 characters", "{{ 'a'|center(9223372036854775807) }}", "center makes more than 268435456"),
            ("truncate shorter than its end", "{{ 'foo'|truncate(2) }}", "truncate: expected length >= 3, got 2"),
            ("slice into 0 parts", "{{ ([1, 2]|slice(0))|list }}", "slice into 0 parts"),
            ("filesizeformat of a word", "{{ 'abc'|filesizeformat }}", "filesizeformat of 'abc', not a number"),
            ("attr with a number", "{{ 'a'|attr(4) }}", "attr expects a string, got '4'"),
            ("index of a missing substring", "{{ 'abc'.index('z') }}", "index: substring not found"),
            ("index of a missing item", "{{ [1].index(2) }}", "index: '2' is not in the list"),
            # x[] would leave a null index for rendering to dereference (SIGSEGV); x[1 2] is not x[2].
            ("an empty subscript", "{{ x[] }}", "an empty subscript []"),
            ("two expressions in a subscript", "{{ [1, 2][1 0] }}", "expected ':' or ']' in a subscript"),
            ("islower beyond ASCII", "{{ 'é'.islower() }}", "islower() of text beyond ASCII is not supported"),
            ("ljust with two fill characters", "{{ 'a'.ljust(3, 'xy') }}", "the fill character must be one character"),
            ("rjust to 2^63 characters", "{{ 'a'.rjust(9223372036854775807) }}", "rjust makes more than 268435456"),
            ("join growing a string 10**5 times", "{{ (range(100000)|list)|join('y' * 100000)|length }}",
             "join makes more than 268435456 bytes"),
            # Refused, not cast to an int (2^40 would become 0).
            ("tojson with a huge indent", "{{ [1]|tojson(indent=1099511627776) }}",
             "tojson indent 1099511627776 is past 1024"),
            # A Value per character: 200 MB of text asked for 20 GB.
            ("iterating a 200 MB string", "{% for c in 'x' * 200000000 %}{% endfor %}",
             "iterating a string of 200000000 bytes (at most 4 MiB)"),
            ("indent growing a string 10**5 times", "{{ ('x\\n' * 100000)|indent('y' * 100000)|length }}",
             "indent makes more than 268435456 bytes"),
            # Each range within the limit, but 10**10 steps nested (hours): stopped after 10**7 (2.5 s here, 12 s
            # under AddressSanitizer).
            ("nested loops of 10**10 steps", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
             "{% endfor %}", "loops ran more than 10000000 iterations in one rendering"),
            ("int64 overflow", "{{ 9223372036854775807 + 1 }}", "integer overflow"),
            # The remainder by 0 trapped (SIGFPE, exit 136); jinja2 raises ZeroDivisionError.
            ("divisibleby 0", "{{ 3 is divisibleby 0 }}", "template line 1: divisibleby 0"),
            ("sorting numbers with strings", "{{ [1, 'a']|sort }}", "cannot compare"),
            ("an unknown filter argument", "{{ [1]|sort(by='x') }}", "filter 'sort' has no argument 'by'"),
            ("a truncated \\x escape", r"{{ '\x4' }}", "truncated \\x escape in a string (needs 2 hex digits)"),
            ("a surrogate escape", r"{{ '\ud800' }}", "is not a Unicode character (U+D800)"),
            # inf before (Python: ZeroDivisionError).
            ("0 to a negative power", "{{ 0 ** -1 }}", "0 cannot be raised to a negative power"),
            # Formatted as Python does, and its errors as Python's.
            ("too few format arguments", "{{ '%s %s' % 5 }}", "not enough arguments for format string"),
            ("too many format arguments", "{{ '%s' % (1, 2) }}", "not all arguments converted during string formatting"),
            ("a bad format character", "{{ '%z' % 1 }}", "unsupported format character 'z'"),
            ("sorting by a missing attribute", "{{ [3, 1]|sort(attribute='x') }}",
             "cannot compare an undefined value with an undefined value"),
            ("a tuple plus a list", "{{ (1, 2) + [3] }}", "cannot add (1, 2) and [3] (a tuple and a list)"),
            ("unique over lists", "{{ [[1], [1]]|unique|list }}", "unique: unhashable value [1]"),
            ("strftime_now without a format", "{{ strftime_now() }}", "strftime_now takes one format string"),
            # The literal itself: std::stoll threw out_of_range, printed as a bare "stoll".
            ("an integer literal past int64", "{{ 99999999999999999999 }}",
             "template line 1: integer literal 99999999999999999999 is past 64 bits"),
            ("int64 overflow in **", "{{ 2 ** 64 }}", "integer overflow"),
            ("int64 overflow in //", "{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"),
            ("int64 overflow in abs", "{{ (-9223372036854775807 - 1)|abs }}", "integer overflow"),
            ("an infinite float to int", "{{ '1e400'|int }}", "past 64-bit integers"),
            # The one value a template can grow across iterations is a namespace's: bounded, and never itself.
            ("a namespace nested 300 deep", "{% set ns = namespace(x=[]) %}{% for i in range(300) %}"
             "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|length }}", "nested more than 256 levels deep"),
            ("a namespace holding itself", "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns }}",
             "a namespace cannot hold a namespace"),
            ("a list appended to itself", "{% set l = [] %}{{ l.append(l) }}{{ l }}", "'append' is refused"),
            # Python's result is a complex number, which no value here holds.
            ("a negative number to a fractional power", "{{ (-8) ** 0.5 }}", "-8 ** 0.5 is a complex number"),
            # jinja2 refuses arguments a filter does not take.
            ("a filter given an argument it does not take", "{{ 'a'|upper(1) }}",
             "filter 'upper' takes at most 0 arguments, got 1"),
            ("a filter given a keyword it does not take", "{{ [1]|first(x=1) }}", "filter 'first' has no argument 'x'"),
            ("int with another base", "{{ '1A'|int(0, 16) }}", "int with base 16 is not supported"),
            ("strip with a number", "{{ 'a'.strip(1) }}", "strip arg must be None or str, got 1"),
            ("tojson separators that are not a pair", "{{ [1]|tojson(separators=',') }}",
             "tojson separators must be two strings, got ','"),
            ("items of a list", "{{ [1]|items|list }}", "items: can only get item pairs from a mapping, got [1]"),
            ("calling an undefined name", "{{ nosuch(1) }}", "template line 1: 'nosuch' is undefined")]:
        json.dump({"chat_template": source}, open(config, "w"))
        r = run(["chat-template", "--config", config, "--context", path])
        err = r.stderr.strip()
        check(r.returncode == 1 and len(err.splitlines()) == 1 and "raise.json" in err and needle in err,
              f"template with {what} refused: exit {r.returncode}, {err[-150:]!r}")
    # A context nested 100000 deep (it overflowed the stack while being read) is refused, naming the context file;
    # 200 deep renders.
    json.dump({"chat_template": "{{ messages[0].content|length }}"}, open(config, "w"))
    for depth, ok in [(100000, False), (200, True)]:
        deep = os.path.join(D, f"deep-{depth}.json")
        with open(deep, "w") as f:
            f.write('{"messages": [{"role": "user", "content": ' + "[" * depth + "]" * depth + "}]}")
        r = run(["chat-template", "--config", config, "--context", deep], timeout=120)
        err = r.stderr.strip()
        if ok:
            check(r.returncode == 0 and r.stdout == "1", f"context nested {depth} deep renders: {r.stdout!r} {err!r}")
        else:
            check(r.returncode == 1 and len(err.splitlines()) == 1 and deep in err and "nested more than 256" in err,
                  f"context nested {depth} deep refused: exit {r.returncode}, {err[-150:]!r}")
    json.dump({"chat_template": "{% for m in messages %}{{ m.role }"}, open(config, "w"))
    r = run(["chat-template", "--config", config, "--context", path])
    check(r.returncode == 1 and "raise.json" in r.stderr, f"malformed template names the file: {r.stderr.strip()}")
    finish()


if __name__ == "__main__":
    main()
