/* jinja_lex.c - split a Jinja template into tokens.
 *
 * Whitespace follows Jinja2 as transformers configures it: newlines are
 * normalized to "\n" and one trailing newline of the source is dropped
 * (keep_trailing_newline=False); trim_blocks removes the first newline
 * after a block or comment tag; lstrip_blocks removes spaces and tabs
 * from the start of a line up to a block or comment tag; "-" inside a tag
 * delimiter strips all whitespace on that side, "+" on the left turns
 * lstrip_blocks off for that tag. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "jinja_internal.h"

struct lexer {
	struct jarena *a;   /* token storage */
	const char *s;	    /* normalized source */
	size_t len;	    /* its length */
	size_t pos;	    /* read position */
	int line;	    /* current line */
	struct jtok *v;	    /* tokens (malloc'd while lexing) */
	size_t n, cap;	    /* of v */
};

static int push(struct lexer *L, enum jtok_kind k, int line, const char *s, size_t len)
{
	if (L->n == L->cap) {
		size_t cap = L->cap ? 2 * L->cap : 256;
		struct jtok *v = realloc(L->v, cap * sizeof(*v));
		if (!v)
			return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
		L->v = v;
		L->cap = cap;
	}
	struct jtok *t = &L->v[L->n++];
	memset(t, 0, sizeof(*t));
	t->kind = k;
	t->line = line;
	t->s = s ? jarena_strdup(L->a, s, len) : "";
	t->len = s ? len : 0;
	if (!t->s)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	return 0;
}

static int count_lines(const char *s, size_t n)
{
	int c = 0;
	for (size_t i = 0; i < n; i++)
		c += s[i] == '\n';
	return c;
}

static void put_utf8(char *o, size_t *k, uint32_t cp)
{
	if (cp < 0x80) {
		o[(*k)++] = (char)cp;
	} else if (cp < 0x800) {
		o[(*k)++] = (char)(0xc0 | (cp >> 6));
		o[(*k)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		o[(*k)++] = (char)(0xe0 | (cp >> 12));
		o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[(*k)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		o[(*k)++] = (char)(0xf0 | (cp >> 18));
		o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[(*k)++] = (char)(0x80 | (cp & 0x3f));
	}
}

static int hexval(const char *s, int n, uint32_t *cp)
{
	uint32_t v = 0;
	for (int i = 0; i < n; i++) {
		if (!isxdigit((unsigned char)s[i]))
			return -1;
		v = v * 16 + (uint32_t)(isdigit((unsigned char)s[i]) ? s[i] - '0'
						       : (tolower((unsigned char)s[i]) - 'a' + 10));
	}
	*cp = v;
	return 0;
}

/* A string literal at L->pos (quote included); Python escapes. */
static int lex_string(struct lexer *L)
{
	char q = L->s[L->pos];
	size_t i = L->pos + 1;
	int line = L->line;
	char *o = malloc(L->len - L->pos + 1);
	size_t k = 0;
	if (!o)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	while (i < L->len && L->s[i] != q) {
		char c = L->s[i];
		if (c == '\n')
			L->line++;
		if (c != '\\' || i + 1 >= L->len) {
			o[k++] = c;
			i++;
			continue;
		}
		char e = L->s[i + 1];
		uint32_t cp;
		int hex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
		i += 2;
		switch (e) {
		case 'n': o[k++] = '\n'; break;
		case 't': o[k++] = '\t'; break;
		case 'r': o[k++] = '\r'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'v': o[k++] = '\v'; break;
		case 'a': o[k++] = '\a'; break;
		case '0': o[k++] = '\0'; break;
		case '\\': o[k++] = '\\'; break;
		case '\'': o[k++] = '\''; break;
		case '"': o[k++] = '"'; break;
		case '\n': L->line++; break; /* line continuation */
		default:
			if (hex && i + (size_t)hex <= L->len && !hexval(L->s + i, hex, &cp) &&
			    cp <= 0x10ffff) {
				put_utf8(o, &k, cp);
				i += (size_t)hex;
			} else {
				o[k++] = '\\';
				o[k++] = e;
			}
		}
	}
	if (i >= L->len) {
		free(o);
		return atlas_error(ATLAS_EFORMAT, "chat template line %d: unterminated string", line);
	}
	L->pos = i + 1;
	int rc = push(L, JT_STRING, line, o, k);
	free(o);
	return rc;
}

static const char *const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/",
				  "%",	"~",  "<",  ">",  "=",	"(",  ")", "[", "]", "{",
				  "}",	",",  ".",  ":",  "|",	NULL};

/* Tokens inside {{ }} or {% %} up to the closing delimiter `end`. */
static int lex_tag(struct lexer *L, const char *end, enum jtok_kind endkind, bool trim_nl)
{
	int depth = 0; /* open brackets: "}}" inside a dict literal is not the end */
	size_t elen = strlen(end);
	for (;;) {
		while (L->pos < L->len && isspace((unsigned char)L->s[L->pos])) {
			L->line += L->s[L->pos] == '\n';
			L->pos++;
		}
		if (L->pos >= L->len)
			return atlas_error(ATLAS_EFORMAT, "chat template line %d: missing '%s'",
					   L->line, end);
		const char *p = L->s + L->pos;
		size_t left = L->len - L->pos;
		bool dash = left > elen && p[0] == '-' && !memcmp(p + 1, end, elen);
		if (depth == 0 && (dash || (left >= elen && !memcmp(p, end, elen)))) {
			int rc = push(L, endkind, L->line, NULL, 0);
			if (rc)
				return rc;
			L->pos += elen + dash;
			if (dash) {
				while (L->pos < L->len && isspace((unsigned char)L->s[L->pos])) {
					L->line += L->s[L->pos] == '\n';
					L->pos++;
				}
			} else if (trim_nl && L->pos < L->len && L->s[L->pos] == '\n') {
				L->pos++;
				L->line++;
			}
			return 0;
		}
		unsigned char c = (unsigned char)*p;
		int rc;
		if (c == '\'' || c == '"') {
			rc = lex_string(L);
		} else if (isalpha(c) || c == '_') {
			size_t k = 1;
			while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_'))
				k++;
			rc = push(L, JT_NAME, L->line, p, k);
			L->pos += k;
		} else if (isdigit(c)) {
			size_t k = 0;
			bool flt = false;
			while (k < left && (isdigit((unsigned char)p[k]) || p[k] == '_'))
				k++;
			if (k + 1 < left && p[k] == '.' && isdigit((unsigned char)p[k + 1])) {
				flt = true;
				k++;
				while (k < left && (isdigit((unsigned char)p[k]) || p[k] == '_'))
					k++;
			}
			if (k < left && (p[k] == 'e' || p[k] == 'E')) {
				size_t e = k + 1;
				if (e < left && (p[e] == '+' || p[e] == '-'))
					e++;
				if (e < left && isdigit((unsigned char)p[e])) {
					flt = true;
					k = e;
					while (k < left && isdigit((unsigned char)p[k]))
						k++;
				}
			}
			char num[64];
			size_t m = 0;
			for (size_t j = 0; j < k && m < sizeof(num) - 1; j++)
				if (p[j] != '_')
					num[m++] = p[j];
			num[m] = '\0';
			rc = push(L, flt ? JT_FLOAT : JT_INT, L->line, p, k);
			if (!rc && flt)
				L->v[L->n - 1].f = strtod(num, NULL);
			else if (!rc)
				L->v[L->n - 1].i = strtoll(num, NULL, 10);
			L->pos += k;
		} else {
			const char *op = NULL;
			for (int j = 0; ops[j]; j++)
				if (!strncmp(p, ops[j], strlen(ops[j]))) {
					op = ops[j];
					break;
				}
			if (!op)
				return atlas_error(ATLAS_EFORMAT,
						   "chat template line %d: unexpected character '%c'",
						   L->line, c);
			if (strchr("([{", op[0]) && op[1] == '\0')
				depth++;
			else if (strchr(")]}", op[0]) && op[1] == '\0' && depth > 0)
				depth--;
			rc = push(L, JT_OP, L->line, op, strlen(op));
			L->pos += strlen(op);
		}
		if (rc)
			return rc;
	}
}

/* Normalize newlines and drop one trailing newline. Malloc'd. */
static char *normalize(const char *src, size_t len, size_t *out_len)
{
	char *s = malloc(len + 1);
	size_t k = 0;
	if (!s)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[k++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[k++] = src[i];
		}
	}
	if (k > 0 && s[k - 1] == '\n')
		k--;
	s[k] = '\0';
	*out_len = k;
	return s;
}

static int lex_all(struct lexer *L)
{
	bool line_start = true; /* the text chunk begins a line */
	for (;;) {
		size_t start = L->pos, at = L->pos;
		const char *open = NULL;
		while (at + 1 < L->len) {
			if (L->s[at] == '{' && strchr("{%#", L->s[at + 1])) {
				open = L->s + at;
				break;
			}
			at++;
		}
		if (!open)
			at = L->len;
		size_t tlen = at - start;
		char kind = open ? open[1] : 0;
		char mod = open && at + 2 < L->len ? open[2] : 0;
		if (open && mod == '-') {
			while (tlen > 0 && isspace((unsigned char)L->s[start + tlen - 1]))
				tlen--;
		} else if (open && mod != '+' && (kind == '%' || kind == '#')) {
			/* lstrip_blocks: only spaces/tabs between line start and the tag */
			size_t ls = tlen;
			while (ls > 0 && L->s[start + ls - 1] != '\n')
				ls--;
			bool blank = true;
			for (size_t j = ls; j < tlen; j++)
				blank &= L->s[start + j] == ' ' || L->s[start + j] == '\t' ||
					 L->s[start + j] == '\f' || L->s[start + j] == '\v';
			if (blank && (ls > 0 || line_start))
				tlen = ls;
		}
		if (tlen > 0 && push(L, JT_TEXT, L->line, L->s + start, tlen))
			return ATLAS_ENOMEM;
		L->line += count_lines(L->s + start, at - start);
		if (!open)
			break;
		L->pos = at + 2 + (mod == '-' || mod == '+');
		int rc;
		if (kind == '#') {
			const char *e = strstr(L->s + L->pos, "#}");
			if (!e)
				return atlas_error(ATLAS_EFORMAT,
						   "chat template line %d: unterminated comment", L->line);
			size_t epos = (size_t)(e - L->s);
			bool dash = epos > L->pos && L->s[epos - 1] == '-';
			L->line += count_lines(L->s + L->pos, epos - L->pos);
			L->pos = epos + 2;
			if (dash) {
				while (L->pos < L->len && isspace((unsigned char)L->s[L->pos])) {
					L->line += L->s[L->pos] == '\n';
					L->pos++;
				}
			} else if (L->pos < L->len && L->s[L->pos] == '\n') {
				L->pos++;
				L->line++;
			}
			rc = 0;
		} else if (kind == '{') {
			rc = push(L, JT_VAR_BEGIN, L->line, NULL, 0);
			if (!rc)
				rc = lex_tag(L, "}}", JT_VAR_END, false);
		} else {
			rc = push(L, JT_BLOCK_BEGIN, L->line, NULL, 0);
			if (!rc)
				rc = lex_tag(L, "%}", JT_BLOCK_END, true);
		}
		if (rc)
			return rc;
		line_start = L->pos > 0 && L->s[L->pos - 1] == '\n';
	}
	return push(L, JT_EOF, L->line, NULL, 0);
}

int atlas_jinja_lex(struct jarena *a, const char *src, size_t len, struct jtok **toks, size_t *n)
{
	struct lexer L = {.a = a, .line = 1};
	char *s = normalize(src, len, &L.len);
	if (!s)
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	L.s = s;
	int rc = lex_all(&L);
	free(s);
	if (rc) {
		free(L.v);
		return rc;
	}
	*toks = jarena_alloc(a, L.n * sizeof(**toks));
	if (!*toks) {
		free(L.v);
		return atlas_error(ATLAS_ENOMEM, "out of memory parsing the chat template");
	}
	memcpy(*toks, L.v, L.n * sizeof(**toks));
	*n = L.n;
	free(L.v);
	return 0;
}
