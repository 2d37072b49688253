/* test-jinja.c - the chat-template interpreter construct by construct.
 *
 * The expected output of every case below was produced by Python Jinja2
 * 3.1.6 set up as transformers sets it up (trim_blocks, lstrip_blocks,
 * loopcontrols, its tojson and raise_exception), over the variables in
 * VARS; then the errors: syntax errors with their line, unknown filters,
 * tests and statements named at parse time, and runtime errors (Python's
 * messages, raise_exception's text). */
#include <json.h>
#include <stdbool.h>
#include <stdio.h>
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

/* --- untrusted templates: arithmetic, nesting and budgets ------------------ */

/* Render `src` with VARS within `lim` (NULL: the defaults). */
static char *render_lim(const char *src, const struct atlas_jinja_limits *lim, int *rc)
{
	struct atlas_jinja *t;
	char *out = NULL;
	size_t len;
	*rc = atlas_jinja_parse(src, strlen(src), &t);
	if (*rc)
		return NULL;
	json_object *vars = json_tokener_parse(VARS);
	*rc = atlas_jinja_render_limited(t, vars, lim, &out, &len);
	json_object_put(vars);
	atlas_jinja_free(t);
	return out;
}

static void expect_render(const char *src, const char *want)
{
	int rc;
	char *out = render(src, &rc);
	if (!out)
		harness_fail(__FILE__, __LINE__, "'%.60s': %s", src, atlas_errmsg());
	else
		CHECK_STR(out, want);
	free(out);
}

/* `n` copies of `s`, then `mid`, then `n` copies of `e` (malloc'd). */
static char *nested(const char *s, size_t n, const char *mid, const char *e)
{
	size_t ls = strlen(s), lm = strlen(mid), le = strlen(e);
	char *b = malloc(n * (ls + le) + lm + 1), *p = b;
	for (size_t i = 0; i < n; i++, p += ls)
		memcpy(p, s, ls);
	memcpy(p, mid, lm);
	p += lm;
	for (size_t i = 0; i < n; i++, p += le)
		memcpy(p, e, le);
	*p = '\0';
	return b;
}

/* Integer operators never wrap or trap (INT64_MIN // -1 was SIGFPE,
 * 10 ** 100000 rendered 0): a result past int64_t is an error naming
 * the operator and the line. */
static void test_int_overflow(void)
{
	expect_render_error("{{ (-9223372036854775807 - 1) // -1 }}", "line 1: integer overflow in '//'");
	expect_render("{{ (-9223372036854775807 - 1) % -1 }}", "0");
	expect_render("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}", "True");
	expect_render_error("\n{{ 9223372036854775807 + 1 }}", "line 2: integer overflow in '+'");
	expect_render_error("{{ -9223372036854775807 - 2 }}", "integer overflow in '-'");
	expect_render_error("{{ 4294967296 * 4294967296 }}", "integer overflow in '*'");
	expect_render_error("{{ 10 ** 100000 }}", "integer overflow in '**'");
	expect_render_error("{{ -(-9223372036854775807 - 1) }}", "integer overflow in unary '-'");
	expect_render_error("{{ (-9223372036854775807 - 1) | abs }}", "integer overflow in 'abs'");
	expect_render_error("{{ [9223372036854775807, 1] | sum }}", "integer overflow in 'sum'");
	expect_render_error("{{ 1e300 | int }}", "integer overflow in 'int'");
	expect_render_error("{{ n // 0 }}", "integer division or modulo by zero");
	expect_render_error("{{ n % 0 }}", "integer division or modulo by zero");
	expect_render_error("{{ f // 0 }}", "float floor division by zero");
	expect_render_error("{{ f % 0.0 }}", "float modulo by zero");
	/* exact results up to the edge, quickly (squaring, not 10^12 multiplications) */
	expect_render("{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 0 ** 100000 }} {{ 1 ** 1000000000000 }} "
		      "{{ (-1) ** 1000000000001 }} {{ 2 ** -1 }} {{ 9223372036854775807 // -1 }} "
		      "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }}",
		      "4611686018427387904 -9223372036854775808 0 1 -1 0.5 -9223372036854775807 -4 2 -2");
	/* ranges and slices whose next index would overflow */
	expect_render("{{ range(9223372036854775806, 9223372036854775807, 4611686018427387904) | list }}"
		      "{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807) | list }}"
		      "{{ l[1::9223372036854775807] }}{{ l[::-9223372036854775807 - 1] }}{{ u[3::9223372036854775807] }}",
		      "[9223372036854775806][-9223372036854775808, -1, 9223372036854775806][1][2]\360\237\221\215");
}

/* Deep nesting is refused by the parser (20,000 ifs and 30,000
 * parentheses overflowed its stack) and by the evaluator, with the line. */
static void test_nesting(void)
{
	static const struct {
		const char *open, *mid, *close;
		size_t n;
	} deep[] = {
		{"{% if true %}", "x", "{% endif %}", 20000},
		{"{% for x in l %}", "x", "{% endfor %}", 20000},
		{"{% if false %}", "", "{% elif false %}", 20000},
		{"{{ ", "1", " }}", 1},
		{"(", "1", ")", 30000},
		{"[", "1", "]", 30000},
		{"{'a': ", "1", "} ", 30000},
		{"f(", "1", ")", 30000},
		{"-", "1", "", 30000},
		{"not ", "1", "", 30000},
		{"1 if ", "1", " else 1", 30000},
		{"", "1", " + 1", 100000},
		{"", "'a'", " | trim", 100000},
		{"", "d", ".a", 100000},
		{"", "l", "[0]", 100000},
		{"", "2", " ** 1", 100000},
		{"", "n", " and n", 100000},
	};
	for (size_t i = 0; i < sizeof(deep) / sizeof(deep[0]); i++) {
		char *inner = nested(deep[i].open, deep[i].n, deep[i].mid, deep[i].close);
		char *src = inner;
		bool expr = strncmp(deep[i].open, "{%", 2) && strncmp(deep[i].open, "{{", 2);
		if (expr) { /* an expression: inside {{ }} on line 2 */
			src = malloc(strlen(inner) + 16);
			sprintf(src, "\n{{ %s }}", inner);
			free(inner);
		}
		if (deep[i].n == 1) { /* the {{ 1 }} row is the control case */
			expect_render(src, "1");
			free(src);
			continue;
		}
		struct atlas_jinja *t = NULL;
		int rc = atlas_jinja_parse(src, strlen(src), &t);
		if (rc != ATLAS_EUNSUPPORTED)
			harness_fail(__FILE__, __LINE__, "row %zu: parse returned %d (%s)", i, rc,
				     atlas_errmsg());
		CHECK(t == NULL);
		CHECK_CONTAINS(atlas_errmsg(), "nested too deeply");
		CHECK_CONTAINS(atlas_errmsg(), expr ? "line 2:" : "line 1:");
		atlas_jinja_free(t);
		free(src);
	}
	/* what real templates do stays well inside */
	char *ok = nested("{% if true %}", 200, "x", "{% endif %}");
	expect_render(ok, "x");
	free(ok);
	ok = nested("[", 200, "1", "]");
	char src[4096];
	snprintf(src, sizeof(src), "{{ %s | length }}", ok);
	expect_render(src, "1");
	free(ok);
	/* the evaluator: recursion through macros, each level 40 deep */
	ok = nested("[", 40, "m(k - 1)", "]");
	snprintf(src, sizeof(src),
		 "{%% macro m(k) %%}{%% if k > 0 %%}{{ %s }}{%% endif %%}{%% endmacro %%}\n{{ m(60) }}",
		 ok);
	free(ok);
	expect_render_error(src, "nested too deeply (more than 1024 levels while rendering)");
	/* map('map', 'map', ...) recursed once per argument */
	ok = nested("'map', ", 5000, "'upper'", "");
	char *big = malloc(strlen(ok) + 64);
	sprintf(big, "{{ ['a'] | map(%s) | list }}", ok);
	expect_render_error(big, "nested too deeply (more than 1024 levels while rendering)");
	free(big);
	free(ok);
	expect_render("{{ [['a', 'b']] | map('map', 'upper') | map('list') | list }}", "[['A', 'B']]");
	/* values: a list nested 100,000 deep overflowed repr's stack */
	expect_render_error("{% set ns = namespace(x=[]) %}\n{% for i in range(100000) %}"
			    "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}",
			    "line 2: values nested too deeply");
	expect_render("{% set ns = namespace(x=[]) %}{% for i in range(200) %}"
		      "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson | length }}{{ ns.x == ns.x }}",
		      "402True");
}

/* 'x' * n was quadratic (100,000 took 5 GB); now one buffer, and a
 * repetition past the output limit is refused before it is built. */
static void test_repetition(void)
{
	int rc;
	char *out = render("{{ 'ab' * 100000 }}", &rc);
	CHECK(out != NULL && strlen(out) == 200000 && !strncmp(out + 199990, "ababababab", 10));
	free(out);
	out = render("{% set ns = namespace(s='') %}{% for i in range(20000) %}"
		     "{% set ns.s = ns.s ~ 'x' %}{% endfor %}{{ ns.s | length }}",
		     &rc);
	CHECK_STR(out, "20000");
	free(out);
	expect_render("{{ 3 * 'ab' }}{{ 'x' * 0 }}{{ 'x' * -2 }}{{ [1, 2] * 2 }}{{ 2 * [0] }}{{ true * 'y' }}",
		      "ababab[1, 2, 1, 2][0, 0]y");
	expect_render_error("{{ 'x' * 1000000000000 }}", "template render exceeded 67108864 output bytes");
	expect_render_error("{{ 'abc' * 9223372036854775807 }}", "exceeded 67108864 output bytes");
	expect_render_error("{{ ([0] * 1000000000) | length }}", "template render exceeded 10000000 steps");
	expect_render_error("{{ ([0, 1] * 4611686018427387904) | length }}", "exceeded 10000000 steps");
}

/* Loops, lists and strings share one budget per render. */
static void test_budgets(void)
{
	struct atlas_jinja_limits d = atlas_jinja_default_limits();
	CHECK_EQ_INT(d.max_steps, 10000000);
	CHECK_EQ_INT(d.max_output, 64 << 20);
	CHECK_EQ_INT(d.max_memory, 512 << 20);
	expect_render_error("{% for i in range(100000) %}\n{% for j in range(100000) %}{% endfor %}{% endfor %}",
			    "line 2: template render exceeded 10000000 steps");
	expect_render_error("{{ range(1000000000) | length }}", "exceeded 10000000 steps");
	expect_render_error("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
			    "{% set ns.l = ns.l + ns.l %}{% endfor %}",
			    "exceeded 10000000 steps");
	expect_render_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
			    "{% set ns.s = ns.s + ns.s %}{% endfor %}",
			    "exceeded 67108864 output bytes");
	expect_render_error("{% set s = 'x' * 40000000 %}{{ s }}{{ s }}", "exceeded 67108864 output bytes");
	/* work that builds nothing is charged too: searching, comparing, sorting */
	expect_render_error("{% set s = 'x' * 60000000 %}{% for i in range(100000) %}"
			    "{% if 'y' in s or s == s ~ '' %}{% endif %}{% endfor %}",
			    "exceeded");
	expect_render_error("{% set l = range(1000000) | list %}{% for i in range(1000) %}"
			    "{% if l | sort | first %}{% endif %}{% endfor %}",
			    "exceeded 10000000 steps");
	/* smaller limits through the API; a zero member keeps its default */
	struct atlas_jinja_limits small = {.max_steps = 1000};
	int rc;
	char *out = render_lim("{% for i in range(10) %}{{ i }}{% endfor %}", &small, &rc);
	CHECK_STR(out, "0123456789");
	free(out);
	out = render_lim("{% for i in range(10000) %}{{ i }}{% endfor %}", &small, &rc);
	CHECK(out == NULL);
	CHECK_EQ_INT(rc, ATLAS_EINVAL);
	CHECK_CONTAINS(atlas_errmsg(), "line 1: template render exceeded 1000 steps");
	small = (struct atlas_jinja_limits){.max_output = 100};
	out = render_lim("{% for i in range(30) %}{{ 'abcd' }}{% endfor %}", &small, &rc);
	CHECK(out == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "template render exceeded 100 output bytes");
	out = render_lim("{% macro m() %}{{ 'y' * 200 }}{% endmacro %}{{ m() | length }}", &small, &rc);
	CHECK(out == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "exceeded 100 output bytes");
	small = (struct atlas_jinja_limits){.max_memory = 1 << 20};
	out = render_lim("{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
			 "{% set ns.l = ns.l + ['x' * 100000] %}{% endfor %}",
			 &small, &rc);
	CHECK(out == NULL);
	CHECK_CONTAINS(atlas_errmsg(), "template render exceeded 1048576 bytes of memory");
	/* raise_exception's message is its own, budget or not */
	expect_render_error("{{ raise_exception('x' * 10) }}", "chat template: xxxxxxxxxx");
}

/* Strings are walked once: iterating, slicing and listing a long string
 * were quadratic in its length. */
static void test_linear_strings(void)
{
	int rc;
	char *out = render("{% set s = '\303\251' * 300000 %}{{ s | list | length }} {{ s[::-1] | length }} "
			   "{{ s[1::2] | length }} {{ s[-2:] }} {% set ns = namespace(k=0) %}"
			   "{% for c in s[:30000] %}{% set ns.k = ns.k + 1 %}{% endfor %}{{ ns.k }}",
			   &rc);
	if (!out)
		harness_fail(__FILE__, __LINE__, "%s", atlas_errmsg());
	CHECK_STR(out, "300000 300000 150000 \303\251\303\251 30000");
	free(out);
	expect_render("{{ 'a,b,c'.split(',') }}{{ ('x,' * 300).split(',') | length }}"
		      "{{ ('x,' * 300).rsplit(',', 2) | length }}{{ 'a,b,c,d'.rsplit(',', 2) }}"
		      "{{ 'a,b,c,d'.split(',', 2) }}",
		      "['a', 'b', 'c']3013['a,b', 'c', 'd']['a', 'b', 'c,d']");
}

int main(void)
{
	RUN(test_constructs);
	RUN(test_generation_block);
	RUN(test_parse_errors);
	RUN(test_render_errors);
	RUN(test_reuse);
	RUN(test_int_overflow);
	RUN(test_nesting);
	RUN(test_repetition);
	RUN(test_budgets);
	RUN(test_linear_strings);
	return harness_done();
}
