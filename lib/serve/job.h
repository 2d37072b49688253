/* job.h - one generation job as job.c (its life cycle: submission,
 * output, waiting, cancellation), job_body.c (JSON pieces and the whole
 * non-streaming body) and job_stream.c (the SSE stream) share it. A job
 * is one HTTP request: n choices for each of its prompts, each choice
 * its own scheduler request. Private to lib/serve. */
#ifndef ATLAS_SERVE_JOB_H
#define ATLAS_SERVE_JOB_H

#include "serve_internal.h"

/* A tool call of a non-streaming choice. */
struct job_call {
	char id[48];		      /* call id (the parser's) */
	char *name;		      /* function name (owned) */
	struct sbuf args;	      /* its arguments, JSON text */
	bool ended;		      /* complete (CALL_END): only these are answered */
};

/* One choice: one scheduler request and what it produced. */
struct job_choice {
	struct atlas_sreq *r;	      /* its request; NULL before submission and after release */
	int index;		      /* "index" in the response: prompt * n + j */
	int prompt;		      /* its prompt, in job.prompts */
	bool first;		      /* j = 0: usage counts its prompt (and cached tokens) */
	int64_t n_gen;		      /* tokens seen so far */
	double t_first;		      /* when its first token came (serve_now), or 0 */
	bool done;		      /* the request finished; res valid */
	bool logged;		      /* its log line was written */
	struct atlas_sreq_result res; /* outcome */
	struct sbuf text;	      /* non-stream: all its text */
	json_object *lp; /* non-stream logprobs: chat content list or completion object */
	size_t lp_off;	 /* completions logprobs: text offset of the next token */
	struct atlas_toolparse *tp;   /* splits reasoning, content and tool calls, or NULL */
	struct sbuf reasoning;	      /* non-stream: the thought */
	struct job_call *calls;	      /* non-stream: the tool calls */
	int n_calls;		      /* tool calls begun (stream too) */
	int n_ended;		      /* of those, complete */
	int blk;		      /* Anthropic stream: the open content block, or -1 */
	int blk_kind;		      /* its kind (enum atlas_toolev_kind of what opened it) */
	int n_blk;		      /* content blocks opened so far */
};

/* A job runs in the worker thread of its request (http.c). A streaming
 * job outlives the handoff of its connection: the worker keeps pumping
 * tokens into `wire`, which libmicrohttpd's reader (a pool thread)
 * drains, suspending the connection while `wire` is empty; both hold a
 * reference and the last one frees the job. */
struct job {
	struct atlas_server *srv;     /* the server */
	struct MHD_Connection *mc;    /* the client; stream: NULL once MHD freed the
				       * response (under mu) */
	enum job_kind kind;	      /* chat, completion, messages */
	char id[64];		      /* response id */
	bool stream;		      /* SSE */
	bool include_usage;	      /* usage chunk at the end (OpenAI stream) */
	int logprobs;		      /* -1, or alternatives per token */
	char *stops[SERVE_MAX_STOP];  /* stop strings (copies, for stop_sequence) */
	int n_stop;		      /* entries in stops */
	struct serve_prompt *prompts; /* the prompts (owned; echo text with them) */
	int n_prompts;		      /* entries in prompts */
	struct job_choice *ch;	      /* the choices, by index */
	int n_ch;		      /* entries in ch: n_prompts * n */
	int n_done;		      /* choices finished */
	int failed;		      /* a choice whose engine failed (res.rc), or -1 */
	int wait_on;		      /* the choice to wait on while none has output */
	int phase;		      /* stream: 0 nothing sent, 1 sending, 2 last bytes queued */
	struct sbuf out;	      /* stream bytes made by the worker, not yet in wire */
	double t0;		      /* submission time (serve_now) */
	const char *why;	      /* why unfinished choices ended, for the log:
				       * "server shutdown", or NULL (client gone) */
	char client[64];	      /* rate-limit identity, charged with the tokens */
	int toolfmt;		      /* enum atlas_toolfmt to parse (chat, messages) */
	json_object *tools;	      /* the request's tools (a reference), or NULL */
	bool reasoning;		      /* split reasoning from the answer */
	bool start_in_reasoning;      /* the prompt left <think> open */
	uint64_t seed;		      /* for tool-call ids */

	pthread_mutex_t mu;	      /* guards the fields below (stream) */
	struct sbuf wire;	      /* stream bytes for MHD's reader */
	size_t wire_pos;	      /* bytes of wire already read */
	bool eof;		      /* the worker has added its last bytes to wire */
	bool abort;		      /* end the response with an error (client gone) */
	bool waiting;		      /* the reader suspended the connection for bytes */
	bool closed;		      /* MHD freed the response (the exchange is over) */
	int refs;		      /* holders: the worker, and MHD's response */
};

/* --- job_body.c --------------------------------------------------------- */
/* Text as a JSON string of valid UTF-8 (invalid bytes become U+FFFD). */
json_object *job_utf8(const char *p, size_t n);
/* OpenAI chat logprobs entry of one token. */
json_object *job_chat_lp(struct job *j, const struct atlas_sched_token *t);
/* Completions logprobs: a new object with its four empty lists, and the
 * tokens of a chunk appended to them (*offset advances over their text). */
json_object *job_completion_lp_new(void);
void job_completion_lp_add(struct job *j, json_object *lp, const struct atlas_sched_chunk *c,
			   size_t *offset);
const char *job_openai_finish(const struct atlas_sreq_result *r);
const char *job_anthropic_stop(const struct atlas_sreq_result *r);
/* Anthropic's stop_sequence: the stop string that ended ch, or null. */
json_object *job_stop_sequence(struct job *j, const struct job_choice *ch);
/* OpenAI usage over all choices: prompt tokens once per prompt,
 * completion tokens of every choice, cached prompt tokens of each
 * prompt's first choice. */
json_object *job_usage_openai(struct job *j);
/* Anthropic usage of the one choice; `start`: message_start's, before
 * the cache is known (every prompt token counted as input). */
json_object *job_usage_anthropic(struct job *j, bool start);
/* The head shared by OpenAI objects: id, object, created, model. */
json_object *job_openai_head(struct job *j, const char *object);
/* The complete JSON body of a finished non-streaming job. */
json_object *job_final_body(struct job *j);

/* --- job_agent.c -------------------------------------------------------- */
/* Take the agent settings of g (tools, parser, reasoning) into j. */
void job_agent_take(struct job *j, struct serve_gen *g);
/* Does ch's output go through the splitter? Sets it up (0, or -1 out of memory). */
int job_agent_start(struct job *j, struct job_choice *ch);
/* More output text of ch (through the splitter: events to the stream or
 * to ch's content, reasoning and calls). */
void job_agent_text(struct job *j, struct job_choice *ch, const char *p, size_t n);
/* ch's output ended: flush the splitter. */
void job_agent_end(struct job *j, struct job_choice *ch);
void job_agent_free_choice(struct job_choice *ch);
/* OpenAI finish_reason and Anthropic stop_reason of a finished choice
 * ("tool_calls" / "tool_use" when it called tools). */
const char *job_finish_openai(const struct job_choice *ch);
const char *job_stop_anthropic(const struct job_choice *ch);
/* A tool call id for Anthropic: toolu_ and the parser's characters. */
void job_anthropic_id(const char *id, char *out, size_t cap);

/* --- job_stream.c ------------------------------------------------------- */
/* One splitter event of ch as stream events (OpenAI delta chunks;
 * Anthropic content blocks opened, filled and closed as the kind changes). */
struct atlas_toolev;
void job_stream_event(struct job *j, struct job_choice *ch, const struct atlas_toolev *ev);
/* Append to j->out: the opening events (a role or echo chunk per
 * choice; Anthropic's message_start...); a chunk of ch's tokens; ch's
 * finish chunk; the closing events (usage, [DONE]; or the error of
 * j->failed, with no [DONE]); or, for a stream cut short (shutdown), an
 * error event with `msg` in the API's shape (OpenAI: a data line with
 * {"error": {...}}; Anthropic: event: error), never a normal finish. */
void job_stream_start(struct job *j);
void job_stream_tokens(struct job *j, struct job_choice *ch, const struct atlas_sched_chunk *c);
void job_stream_choice_end(struct job *j, struct job_choice *ch);
void job_stream_end(struct job *j);
void job_stream_cut(struct job *j, const char *msg);

#endif
