/* test-jinja.c - the chat-template interpreter construct by construct.
 *
 * The expected output of every case below was produced by Python Jinja2
 * 3.1.6 set up as transformers sets it up (trim_blocks, lstrip_blocks,
 * loopcontrols, its tojson and raise_exception), over the variables in
 * VARS; then the errors: syntax errors with their line, unknown filters,
 * tests and statements named at parse time, and runtime errors (Python's
 * messages, raise_exception's text). */
#include <json.h>
#include <stdlib.h>
#include <string.h>

#include "../../lib/core/error.h"
#include "../../lib/tok/jinja.h"
#include "harness.h"

static const char VARS[] = "{\"msgs\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"h\303\251llo\"}, {\"role\": \"assistant\", \"content\": \"  hi  \", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}], \"d\": {\"b\": 2, \"a\": 1, \"c\": null}, \"s\": \"Hello, World\", \"n\": 7, \"f\": 2.5, \"none\": null, \"t\": true, \"l\": [3, 1, 2], \"e\": [], \"u\": \"\303\251\346\227\245\346\234\254\360\237\221\215\"}";

static const struct {
	const char *name; /* what the case exercises */
	const char *src;  /* template */
	const char *want; /* Jinja2's render */
} cases[] = {
	{"ws-control",
	 "a  {{- 'b' -}}  c\n  {%- if true -%}  d  {%- endif %}\n",
	 "abcd"},
	{"trim-lstrip",
	 "x\n    {% if true %}\n    y\n    {% endif %}\nz\n",
	 "x\n    y\nz"},
	{"comments",
	 "a{# c #}b\n  {# line #}\nc {#- x -#} d",
	 "ab\ncd"},
	{"lstrip-plus",
	 "a\n    {%+ if true %}b{% endif %}",
	 "a\n    b"},
	{"trailing-newline",
	 "a\n\n",
	 "a\n"},
	{"if-elif-else",
	 "{% for x in [1, 2, 3, 4] %}{% if x == 1 %}one{% elif x is even %}even{% elif x > 2 %}big{% else %}?{% endif %},{% endfor %}",
	 "one,even,big,even,"},
	{"loop-vars",
	 "{% for m in msgs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}|{% endfor %}",
	 "10TrueFalse332|21FalseFalse321|32FalseTrue310|"},
	{"for-else-filter",
	 "{% for x in e %}x{% else %}empty{% endfor %};{% for m in msgs if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}:{{ m.role }} {% endfor %}",
	 "empty;1/2:user 2/2:assistant "},
	{"for-unpack",
	 "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}{% for c in u %}[{{ c }}]{% endfor %}",
	 "b=2;a=1;c=None;bac[\303\251][\346\227\245][\346\234\254][\360\237\221\215]"},
	{"break-continue",
	 "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
	 "0134"},
	{"scoping",
	 "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% endif %}{{ x }}{% set ns = namespace(y=1, z='a') %}{% for i in [1, 2] %}{% set ns.y = ns.y + i %}{% endfor %}{{ ns.y }}{{ ns.z }}",
	 "2134a"},
	{"block-set",
	 "{% set b %}  in{{ n }}side {% endset %}[{{ b }}]{{ b | trim | upper }}",
	 "[  in7side ]IN7SIDE"},
	{"macro",
	 "{% macro greet(name, punct='!', upper=false) %}{{ (name | upper) if upper else name }}{{ punct }}{% endmacro %}{{ greet('a') }}{{ greet('b', '?') }}{{ greet('c', upper=true) }}{% macro twice(x) %}{{ greet(x) }}{{ greet(x) }}{% endmacro %}{{ twice('z') }}",
	 "a!b?C!z!z!"},
	{"tojson",
	 "{{ msgs[2] | tojson }}|{{ {'x': [1, 2.5, 1e-05, 1e20, 3.0, true, none, '\303\251\"\\\\\\n\\t\\u0001'], 'y': {}} | tojson }}|{{ l | tojson(indent=2) }}|{{ {'a': {'b': []}} | tojson(indent=1) }}|{{ u | tojson }}",
	 "{\"role\": \"assistant\", \"content\": \"  hi  \", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}|{\"x\": [1, 2.5, 1e-05, 1e+20, 3.0, true, null, \"\303\251\\\"\\\\\\n\\t\\u0001\"], \"y\": {}}|[\n  3,\n  1,\n  2\n]|{\n \"a\": {\n  \"b\": []\n }\n}|\"\303\251\346\227\245\346\234\254\360\237\221\215\""},
	{"str-filters",
	 "[{{ '  a b  ' | trim }}][{{ 'xxaxx' | trim('x') }}]{{ s | length }}{{ u | length }}{{ d | length }}{{ l | join('-') }}{{ l | join }}{{ s | upper }}{{ s | lower }}{{ 'hello world' | capitalize }}{{ 'hello woRLD' | title }}{{ s | replace('o', '0') }}{{ s | replace('l', 'L', 2) }}",
	 "[a b][a]12433-1-2312HELLO, WORLDhello, worldHello worldHello WorldHell0, W0rldHeLLo, World"},
	{"list-filters",
	 "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}{{ msgs | selectattr('tool_calls') | list | length }}{{ msgs | selectattr('tool_calls', 'defined') | map(attribute='tool_calls') | first | first }}{{ l | first }}{{ l | last }}{{ l | sort }}{{ l | sort(reverse=true) }}{{ ['b', 'A', 'a', 'B'] | unique | list }}{{ l | reverse | list }}{{ 'abc' | reverse }}{{ l | sum }}{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('odd') | list }}{{ ['a', 'b'] | map('upper') | list }}{{ msgs | map(attribute='tool_calls.0.function.name', default='-') | list }}",
	 "['h\303\251llo']system,assistant1{'function': {'name': 'f', 'arguments': {'a': 1}}}32[1, 2, 3][3, 2, 1]['b', 'A'][2, 1, 3]cba6[1, 3][2]['A', 'B']['-', '-', 'f']"},
	{"dict-filters",
	 "{{ d | items | list }}{{ d | dictsort }}{{ d | list }}{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}{{ d.keys() | list }}{{ d.values() | list }}{{ d['b'] }}{{ d.b }}",
	 "[('b', 2), ('a', 1), ('c', None)][('a', 1), ('b', 2), ('c', None)]['b', 'a', 'c']1None5['b', 'a', 'c'][2, 1, None]22"},
	{"default-etc",
	 "{{ missing | default('dflt') }}{{ '' | default('x') }}{{ '' | default('y', true) }}{{ none | default('z', true) }}{{ n | string }}{{ '42' | int + 1 }}{{ 'x' | int }}{{ 2.9 | int }}{{ '1.5' | float }}{{ -3 | abs }}{{ s | safe }}{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}{{ none | string }}{{ none | trim }}",
	 "dfltyz743021.53Hello, Worlda\n  b\n\n  c|  a\n  bNoneNone"},
	{"tests",
	 "{{ missing is defined }}{{ missing is undefined }}{{ none is none }}{{ n is none }}{{ s is string }}{{ n is string }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ n is iterable }}{{ s is iterable }}{{ n is number }}{{ f is number }}{{ t is number }}{{ l is sequence }}{{ s is sequence }}{{ n is sequence }}{{ t is true }}{{ t is false }}{{ false is false }}{{ 0 is false }}{{ t is boolean }}{{ n is integer }}{{ f is float }}{{ n is odd }}{{ n is even }}{{ 9 is divisibleby 3 }}{{ n is eq 7 }}{{ 'a' is in 'cat' }}{{ 'abc' is lower }}{{ 'aBc' is upper }}{{ n is not none }}{{ range is callable }}",
	 "FalseTrueTrueFalseTrueFalseTrueFalseTrueFalseTrueTrueTrueTrueTrueTrueFalseTrueFalseTrueFalseTrueTrueTrueTrueFalseTrueTrueTrueTrueFalseTrueTrue"},
	{"str-methods",
	 "{{ s.startswith('Hell') }}{{ s.startswith(('x', 'He')) }}{{ s.endswith('ld') }}{{ s.split(', ') }}{{ '  a  b\tc\n'.split() }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ 'xxhixx'.strip('x') }}[{{ '  x  '.lstrip() }}][{{ '  x  '.rstrip() }}]{{ '\n\nx\n'.strip('\n') }}{{ s.replace('World', 'There') }}{{ s.upper() }}{{ s.lower() }}{{ 'ab cd'.title() }}{{ 'aB'.capitalize() }}{{ s.find('o') }}{{ u.find('\346\234\254') }}{{ s.count('l') }}{{ '-'.join(['a', 'b']) }}{{ msgs[2].content.strip() }}",
	 "TrueTrueTrue['Hello', 'World']['a', 'b', 'c']['a', 'b,c']['a,b', 'c']hi[x  ][  x]xHello, ThereHELLO, WORLDhello, worldAb CdAb423a-bhi"},
	{"slicing",
	 "{{ l[::-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::2] }}{{ l[-1] }}{{ l[5] }}{{ s[::-1] }}{{ u[::-1] }}{{ u[1:3] }}{{ s[-5:] }}{{ msgs[1:] | length }}{{ msgs[-1].role }}{{ l[1:100] }}{{ l[-100:1] }}{{ s[7:] }}{{ l[:] }}",
	 "[2, 1, 3][1, 2][3, 1][3, 2]2dlroW ,olleH\360\237\221\215\346\234\254\346\227\245\303\251\346\227\245\346\234\254World2assistant[1, 2][3]World[3, 1, 2]"},
	{"operators",
	 "{{ 'ell' in s }}{{ 'x' not in s }}{{ 2 in l }}{{ 'a' in d }}{{ 'z' not in d }}{{ 'a' ~ 1 ~ none ~ true }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 7 // 2 }}{{ -7 // 2 }}{{ 7 % 3 }}{{ -7 % 3 }}{{ 2 ** 10 }}{{ 7 / 2 }}{{ 6 / 2 }}{{ 1 + 2 * 3 - 4 }}{{ (1 + 2) * 3 }}{{ 2.5 * 2 }}{{ 0.1 + 0.2 }}{{ 'ab' * 3 }}{{ [1] + [2] }}{{ -n }}{{ n - -1 }}{{ 1.0 }}{{ 1e3 }}",
	 "TrueTrueTrueTrueTruea1NoneTrueTrueFalseTrueTrue3-41210243.53.0395.00.30000000000000004ababab[1, 2]-781.01000.0"},
	{"logic",
	 "{{ 0 or 'x' }}{{ 'a' and 'b' }}{{ '' and 'b' }}{{ none or [] }}{{ not 0 }}{{ not none and 1 }}{{ 'y' if n > 5 else 'n' }}{{ 'y' if n > 50 else 'n' }}[{{ 'only' if false }}]{{ 1 if true else 2 if false else 3 }}{{ not missing is defined }}",
	 "xb[]True1yn[]1True"},
	{"repr",
	 "{{ [1, 'a', none, true, 1.5, {'k': \"it's\", 'q': 'say \"hi\"'}, [\"x\\ny\"]] }}{{ (1, 2) }}{{ d }}{{ none }}{{ true }}{{ 1e-7 }}{{ 1e16 }}{{ 123456789012345.0 }}{{ -0.0 }}{{ 1/3 }}",
	 "[1, 'a', None, True, 1.5, {'k': \"it's\", 'q': 'say \"hi\"'}, ['x\\ny']](1, 2){'b': 2, 'a': 1, 'c': None}NoneTrue1e-071e+16123456789012345.0-0.00.3333333333333333"},
	{"literals",
	 "{{ \"a\\nb\" }}{{ 'c\\'d' }}{{ '\\u00e9\\x41' }}{{ 'con' 'cat' }}{{ [1, 2,] }}{{ {'a': 1, 'b': [2]} }}{{ () }}{{ 1_000 }}",
	 "a\nbc'd\303\251Aconcat[1, 2]{'a': 1, 'b': [2]}()1000"},
	{"undefined",
	 "[{{ missing }}][{{ d.zz }}][{{ msgs[0].nope }}][{{ none.x }}]{{ missing | length }}{% for x in missing %}x{% endfor %}{{ missing is iterable }}",
	 "[][][][]0True"},
	{"globals",
	 "{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}{{ dict(a=1, b='x') }}{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}",
	 "[0, 1, 2][1, 3, 5][3, 2, 1]{'a': 1, 'b': 'x'}12"},
	{"whitespace-realistic",
	 "{%- for m in msgs %}\n    {%- if m.role == 'user' %}\n        {{- '<u>' + m.content + '</u>\\n' }}\n    {%- else %}\n{{ m.role }}: {{ m.content }}\n    {% endif %}\n{%- endfor %}\n  {# end #}\n{% if true %}\n  done\n{% endif %}\n",
	 "system: sys\n<u>h\303\251llo</u>\nassistant:   hi  \n  done\n"},
};

/* Parse and render `src` with VARS; returns the output or NULL (then *rc
 * holds the error code). */
static char *render(const char *src, int *rc)
{
	struct atlas_jinja *t;
	char *out = NULL;
	size_t len;
	*rc = atlas_jinja_parse(src, strlen(src), &t);
	if (*rc)
		return NULL;
	json_object *vars = json_tokener_parse(VARS);
	*rc = atlas_jinja_render(t, vars, &out, &len);
	if (!*rc && strlen(out) != len)
		harness_fail(__FILE__, __LINE__, "length %zu but strlen %zu", len, strlen(out));
	json_object_put(vars);
	atlas_jinja_free(t);
	return out;
}

static void test_constructs(void)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;
		char *out = render(cases[i].src, &rc);
		if (!out) {
			harness_fail(__FILE__, __LINE__, "%s: %s", cases[i].name, atlas_errmsg());
			continue;
		}
		if (strcmp(out, cases[i].want))
			harness_fail(__FILE__, __LINE__, "%s:\n#  got  \"%s\"\n#  want \"%s\"",
				     cases[i].name, out, cases[i].want);
		free(out);
	}
}

/* transformers' {% generation %} block renders its body as it is. */
static void test_generation_block(void)
{
	int rc;
	char *out = render("a{% generation %}b{{ n }}{% endgeneration %}c", &rc);
	CHECK_STR(out, "ab7c");
	free(out);
}

static void expect_parse_error(const char *src, int code, const char *msg)
{
	struct atlas_jinja *t = NULL;
	int rc = atlas_jinja_parse(src, strlen(src), &t);
	CHECK_EQ_INT(rc, code);
	CHECK(t == NULL);
	CHECK_CONTAINS(atlas_errmsg(), msg);
}

static void test_parse_errors(void)
{
	expect_parse_error("a\n{{ 1 + }}", ATLAS_EFORMAT, "line 2: syntax error: expected an expression, got '}}'");
	expect_parse_error("x\n\n{% if a %}never closed", ATLAS_EFORMAT, "missing 'endif'");
	expect_parse_error("{% for x in y %}", ATLAS_EFORMAT, "missing 'endfor'");
	expect_parse_error("{% endif %}", ATLAS_EFORMAT, "line 1: syntax error: unexpected 'endif'");
	expect_parse_error("{% if a %}{% else %}{% elif b %}{% endif %}", ATLAS_EFORMAT, "unexpected 'elif'");
	expect_parse_error("{{ x | bogus }}", ATLAS_EUNSUPPORTED, "line 1: unknown filter 'bogus'");
	expect_parse_error("\n{{ x is bogus }}", ATLAS_EUNSUPPORTED, "line 2: unknown test 'bogus'");
	expect_parse_error("{% include 'a' %}", ATLAS_EUNSUPPORTED, "the 'include' statement is not supported");
	expect_parse_error("{% call foo() %}{% endcall %}", ATLAS_EUNSUPPORTED, "the 'call' statement is not supported");
	expect_parse_error("{% raw %}x{% endraw %}", ATLAS_EUNSUPPORTED, "the 'raw' statement is not supported");
	expect_parse_error("{% for x in y recursive %}{% endfor %}", ATLAS_EUNSUPPORTED, "recursive loops");
	expect_parse_error("{% frobnicate %}", ATLAS_EFORMAT, "unknown statement 'frobnicate'");
	expect_parse_error("{{ 'abc }}", ATLAS_EFORMAT, "unterminated string");
	expect_parse_error("a {# never closed", ATLAS_EFORMAT, "unterminated comment");
	expect_parse_error("{{ x ", ATLAS_EFORMAT, "missing '}}'");
	expect_parse_error("{{ x $ y }}", ATLAS_EFORMAT, "unexpected character '$'");
	expect_parse_error("{% set %}", ATLAS_EFORMAT, "expected a variable name");
	expect_parse_error("{{ f(a=1, 2) }}", ATLAS_EFORMAT, "positional argument after keyword");
}

static void expect_render_error(const char *src, const char *msg)
{
	int rc;
	char *out = render(src, &rc);
	CHECK(out == NULL);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), msg);
	free(out);
}

static void test_render_errors(void)
{
	expect_render_error("{{ raise_exception('Roles must alternate') }}", "chat template: Roles must alternate");
	expect_render_error("ok\n{% if n > 1 %}{{ raise_exception('n is ' ~ n) }}{% endif %}", "chat template: n is 7");
	expect_render_error("\n{{ missing.attr }}", "line 2: 'missing' is undefined");
	expect_render_error("{{ d.zz.deeper }}", "'dict object' has no attribute 'zz'");
	expect_render_error("{{ s + n }}", "can only concatenate str (not \"int\") to str");
	expect_render_error("{{ n + s }}", "unsupported operand type(s) for +: 'int' and 'str'");
	expect_render_error("{{ n / 0 }}", "division by zero");
	expect_render_error("{{ n() }}", "'int' object is not callable");
	expect_render_error("{{ l.append(4) }}", "unsafe");
	expect_render_error("{% for x in n %}{% endfor %}", "'int' object is not iterable");
	expect_render_error("{% set x = 1 %}{% set x.y = 2 %}", "non-namespace");
	expect_render_error("{{ 'a' < 1 }}", "'<' not supported between instances of 'str' and 'int'");
	expect_render_error("{{ 1 in none }}", "argument of type 'NoneType' is not iterable");
	expect_render_error("{{ n | length }}", "object of type 'int' has no len()");
	expect_render_error("{{ missing() }}", "'missing' is undefined");
	expect_render_error("{{ d | tojson }}{{ x | tojson }}", "not JSON serializable");
	expect_render_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nested too deeply");
	expect_render_error("{{ l[::0] }}", "slice step cannot be zero");
}

/* One parsed template serves several renders with different variables. */
static void test_reuse(void)
{
	struct atlas_jinja *t;
	const char *src = "{{ a }}-{{ b | default('none') }}";
	CHECK_EQ_INT(atlas_jinja_parse(src, strlen(src), &t), 0);
	for (int i = 0; i < 3; i++) {
		json_object *v = json_object_new_object();
		json_object_object_add(v, "a", json_object_new_int(i));
		if (i == 1)
			json_object_object_add(v, "b", json_object_new_string("x"));
		char *out;
		size_t len;
		CHECK_EQ_INT(atlas_jinja_render(t, v, &out, &len), 0);
		CHECK_STR(out, i == 0 ? "0-none" : i == 1 ? "1-x" : "2-none");
		free(out);
		json_object_put(v);
	}
	atlas_jinja_free(t);
}

int main(void)
{
	RUN(test_constructs);
	RUN(test_generation_block);
	RUN(test_parse_errors);
	RUN(test_render_errors);
	RUN(test_reuse);
	return harness_done();
}
