/* job_agent.c - a chat or messages choice's output split, as it arrives,
 * into reasoning, content and tool calls (toolcall.h), for models that
 * think or requests with tools. A streaming job turns each event into
 * stream events at once (job_stream.c); a whole response keeps them for
 * job_body.c. Without tools and reasoning, text goes straight to content
 * as before (job.c does not call in here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "toolcall.h"

void job_agent_take(struct job *j, struct serve_gen *g)
{
	j->toolfmt = g->ag.fmt;
	j->tools = g->ag.tools;
	g->ag.tools = NULL;
	j->reasoning = g->ag.reasoning;
	j->start_in_reasoning = g->ag.start_in_reasoning;
	j->seed = g->sp.gen.sampling.seed;
}

int job_agent_start(struct job *j, struct job_choice *ch)
{
	ch->blk = -1;
	if (j->kind == JOB_COMPLETION || (j->toolfmt == ATLAS_TOOLFMT_NONE && !j->reasoning))
		return 0;
	ch->tp = atlas_toolparse_new(j->toolfmt, j->reasoning, j->start_in_reasoning, j->tools,
				     j->seed + (uint64_t)ch->index * 0x9e3779b97f4a7c15ull);
	return ch->tp ? 0 : -1;
}

struct ev_ctx {
	struct job *j;
	struct job_choice *ch;
};

/* Keep an event for the whole response. */
static void keep(struct job_choice *ch, const struct atlas_toolev *ev)
{
	switch (ev->kind) {
	case ATLAS_TOOLEV_CONTENT:
		sbuf_add(&ch->text, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_REASONING:
		sbuf_add(&ch->reasoning, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL: {
		struct job_call *c = realloc(ch->calls, (size_t)(ch->n_calls + 1) * sizeof(*c));
		if (!c)
			return;
		ch->calls = c;
		c = &c[ch->n_calls++];
		memset(c, 0, sizeof(*c));
		snprintf(c->id, sizeof(c->id), "%s", ev->id ? ev->id : "");
		c->name = strdup(ev->name ? ev->name : "");
		break;
	}
	case ATLAS_TOOLEV_ARGS:
		if (ev->index >= 0 && ev->index < ch->n_calls)
			sbuf_add(&ch->calls[ev->index].args, ev->text, ev->len);
		break;
	case ATLAS_TOOLEV_CALL_END:
		if (ev->index >= 0 && ev->index < ch->n_calls)
			ch->calls[ev->index].ended = true;
		break;
	}
}

static int on_event(void *ud, const struct atlas_toolev *ev)
{
	struct ev_ctx *x = ud;
	x->ch->n_ended += ev->kind == ATLAS_TOOLEV_CALL_END;
	if (x->j->stream) {
		if (ev->kind == ATLAS_TOOLEV_CALL)
			x->ch->n_calls++;
		job_stream_event(x->j, x->ch, ev);
	} else {
		keep(x->ch, ev);
	}
	return 0;
}

void job_agent_text(struct job *j, struct job_choice *ch, const char *p, size_t n)
{
	struct ev_ctx x = {j, ch};
	if (n)
		atlas_toolparse_feed(ch->tp, p, n, on_event, &x);
}

void job_agent_end(struct job *j, struct job_choice *ch)
{
	struct ev_ctx x = {j, ch};
	if (ch->tp)
		atlas_toolparse_finish(ch->tp, on_event, &x);
}

void job_agent_free_choice(struct job_choice *ch)
{
	atlas_toolparse_free(ch->tp);
	ch->tp = NULL;
	sbuf_free(&ch->reasoning);
	for (int i = 0; i < ch->n_calls && ch->calls; i++) {
		free(ch->calls[i].name);
		sbuf_free(&ch->calls[i].args);
	}
	free(ch->calls);
	ch->calls = NULL;
}

/* A choice that called tools and was not cut by max_tokens. */
static bool called(const struct job_choice *ch)
{
	return ch->n_ended > 0 && ch->res.finish != ATLAS_FINISH_LENGTH;
}

const char *job_finish_openai(const struct job_choice *ch)
{
	return called(ch) ? "tool_calls" : job_openai_finish(&ch->res);
}

const char *job_stop_anthropic(const struct job_choice *ch)
{
	return called(ch) ? "tool_use" : job_anthropic_stop(&ch->res);
}

void job_anthropic_id(const char *id, char *out, size_t cap)
{
	if (!strncmp(id, "call_", 5))
		id += 5;
	snprintf(out, cap, "toolu_%s", id);
}
