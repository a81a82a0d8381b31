// Package openai runs Baton's pipeline on any OpenAI-compatible chat
// completions endpoint — OpenAI itself, or Ollama, vLLM, llama.cpp's server,
// LiteLLM — through github.com/sashabaranov/go-openai. One *Client is the
// planner (structured JSON output, with a plain-JSON fallback for servers
// without json_schema), the decide step of adaptive runs (likewise), the
// solver (one streamed completion per round of a task's agent loop) and the
// aggregator (a streamed summary).
//
// Every failure is mapped once into a *failure.Error so the solver's retry
// policy applies unchanged. The package knows nothing of sessions, events or
// connections: it reports through the callbacks of the interfaces it
// implements.
package openai

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/baton-run/baton/aggregator"
	"github.com/baton-run/baton/failure"
	"github.com/baton-run/baton/planner"
	"github.com/baton-run/baton/solver"
	"github.com/baton-run/baton/wsproto"
)

// OfficialBaseURL is OpenAI's own endpoint, the default.
const OfficialBaseURL = "https://api.openai.com/v1"

// DefaultModel is the model asked for when none is configured.
const DefaultModel = "gpt-4o-mini"

// ErrBaseURL is New's error for a base URL that is not an http(s) URL.
var ErrBaseURL = errors.New("not an http(s) URL")

// Config configures a Client. The zero value talks to OpenAI with no key,
// which New refuses.
type Config struct {
	// APIKey is sent as a bearer token. Required for OfficialBaseURL;
	// local servers usually need none.
	APIKey string
	// BaseURL is the API root, e.g. http://localhost:11434/v1 for Ollama.
	// Defaults to OfficialBaseURL.
	BaseURL string
	// Model is the model name. Defaults to DefaultModel.
	Model string
	// MaxOutputTokens bounds each completion. Defaults to 1024.
	MaxOutputTokens int
	// HTTPClient is the client requests go through. Defaults to a client
	// with no overall timeout (contexts bound every call).
	HTTPClient *http.Client
	// ProgressInterval is the least time between two progress reports of
	// one streamed completion. Defaults to 100ms (at most ~10 a second).
	ProgressInterval time.Duration
	// ResultBudget bounds, in bytes, the dependency results put into one
	// task's prompt. Defaults to 12000.
	ResultBudget int
	// MaxResponseBytes bounds the body of every response of the endpoint,
	// a streamed completion's whole stream included: reading past it
	// fails the call (validation, so it is retried like an unusable
	// reply). go-openai reads a stream line by line with no bound on a
	// line, and an error body whole, so without it a broken or hostile
	// endpoint could make Baton hold any amount. Defaults to 1 MiB plus
	// 1 KiB per MaxOutputTokens — a streamed token costs 150–300 bytes of
	// JSON — so 2 MiB at the default 1024 tokens.
	MaxResponseBytes int64
}

// Client is an OpenAI-compatible model. It is safe for concurrent use.
type Client struct {
	api      *goopenai.Client
	cfg      Config
	official bool
	// noSchema is set once the server has refused a json_schema response
	// format; planning then asks for plain JSON.
	noSchema atomic.Bool
	now      func() time.Time
}

var (
	_ planner.Planner       = (*Client)(nil)
	_ solver.Model          = (*Client)(nil)
	_ aggregator.Aggregator = (*Client)(nil)
)

// New returns a Client. It fails when the official endpoint is configured
// without a key, or the base URL is not an http(s) URL.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = OfficialBaseURL
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: base URL %q: %w", cfg.BaseURL, ErrBaseURL)
	}
	official := strings.EqualFold(u.Host, "api.openai.com")
	if official && cfg.APIKey == "" {
		return nil, errors.New("openai: OPENAI_API_KEY is required for api.openai.com (a local server set with --openai-base-url needs none)")
	}
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	if cfg.MaxOutputTokens <= 0 {
		cfg.MaxOutputTokens = 1024
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = 100 * time.Millisecond
	}
	if cfg.ResultBudget <= 0 {
		cfg.ResultBudget = 12000
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = 1<<20 + int64(cfg.MaxOutputTokens)<<10
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	wrapped := *hc
	wrapped.Transport = retryAfterTransport{base: base, maxBody: cfg.MaxResponseBytes}

	ac := goopenai.DefaultConfig(cfg.APIKey)
	ac.BaseURL = cfg.BaseURL
	ac.HTTPClient = &wrapped
	return &Client{api: goopenai.NewClientWithConfig(ac), cfg: cfg, official: official, now: time.Now}, nil
}

// NotListedError is CheckModel's error when the endpoint answers but does
// not list the configured model.
type NotListedError struct {
	Model     string
	Available []string // the models the endpoint listed
}

func (e *NotListedError) Error() string {
	return fmt.Sprintf("the endpoint does not list model %q (it lists %d models)", e.Model, len(e.Available))
}

// CheckModel asks the endpoint for its models (GET /models) and returns
// nil when the configured model is among them, a *NotListedError when it
// is not, and otherwise the failure, classified like any call's. Baton
// calls it once at start, to warn early; a local server may come up later.
func (c *Client) CheckModel(ctx context.Context) error {
	list, err := c.api.ListModels(ctx)
	if err != nil {
		return fmt.Errorf("list models: %w", classify(ctx, err, 0))
	}
	ids := make([]string, len(list.Models))
	for i, m := range list.Models {
		if m.ID == c.cfg.Model {
			return nil
		}
		ids[i] = m.ID
	}
	return &NotListedError{Model: c.cfg.Model, Available: ids}
}

// request fills in what every chat request of this client shares.
func (c *Client) request(msgs []goopenai.ChatCompletionMessage) goopenai.ChatCompletionRequest {
	req := goopenai.ChatCompletionRequest{
		Model:         c.cfg.Model,
		Messages:      msgs,
		Stream:        true,
		StreamOptions: &goopenai.StreamOptions{IncludeUsage: true},
	}
	if c.official {
		req.MaxCompletionTokens = c.cfg.MaxOutputTokens
	} else {
		// Local servers (Ollama, vLLM, llama.cpp) know max_tokens, and many
		// do not know its replacement, max_completion_tokens.
		//lint:ignore SA1019 deliberate: the deprecated field is the one local servers read
		req.MaxTokens = c.cfg.MaxOutputTokens
	}
	return req
}

// completion is what one streamed completion produced.
type completion struct {
	text      string
	textBytes int // the whole text's length, when text keeps less of it
	calls     []solver.ToolCall
	usage     wsproto.Usage
}

// stream runs one streamed completion, calling onText with each piece of
// content, and returns the text, the tool calls gathered from their
// deltas, and the usage. Every error it returns is a *failure.Error, or
// ctx's error when ctx is done. With keep > 0, no more than keep+1 bytes
// of the text are kept, and textBytes says how long it was.
func (c *Client) stream(ctx context.Context, req goopenai.ChatCompletionRequest, keep int, onText func(string)) (completion, error) {
	slot := &retryAfter{}
	ctx = context.WithValue(ctx, retryAfterKey{}, slot)
	var out completion
	s, err := c.api.CreateChatCompletionStream(ctx, req)
	if err != nil {
		return out, classify(ctx, err, slot.d)
	}
	defer s.Close()
	var text strings.Builder
	var args []strings.Builder // per tool call, by index
	finished := false
	seen := 0 // bytes of text streamed
	for {
		resp, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.text = text.String()
			return out, classify(ctx, err, slot.d)
		}
		if resp.Usage != nil {
			out.usage = wsproto.Usage{PromptTokens: resp.Usage.PromptTokens,
				CompletionTokens: resp.Usage.CompletionTokens, TotalTokens: resp.Usage.TotalTokens}
		}
		for _, ch := range resp.Choices {
			if piece := ch.Delta.Content; piece != "" {
				seen += len(piece)
				if keep <= 0 || text.Len() <= keep {
					text.WriteString(piece)
				}
				onText(piece)
			}
			for _, d := range ch.Delta.ToolCalls {
				// A call's first delta has its id and name; the
				// arguments follow in pieces. A server that sends no
				// index starts each call with its id.
				i := len(out.calls) - 1
				switch {
				case d.Index != nil:
					i = *d.Index
				case d.ID != "" || i < 0:
					i = len(out.calls)
				}
				if i < 0 || i > len(out.calls) || i >= maxToolCalls {
					return out, &failure.Error{Type: failure.Validation, Err: fmt.Errorf("the model sent tool call number %d out of order", i)}
				}
				if i == len(out.calls) {
					out.calls = append(out.calls, solver.ToolCall{})
					args = append(args, strings.Builder{})
				}
				if d.ID != "" {
					out.calls[i].ID = d.ID
				}
				out.calls[i].Name += d.Function.Name
				args[i].WriteString(d.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finished = true
			}
		}
	}
	out.text = text.String()
	if seen > len(out.text) {
		out.textBytes = seen
	}
	for i := range out.calls {
		out.calls[i].Arguments = args[i].String()
		if out.calls[i].ID == "" {
			out.calls[i].ID = fmt.Sprintf("call_%d", i)
		}
	}
	if !finished {
		// Every OpenAI-compatible server ends a complete stream with a
		// finish_reason; a stream that stops without one was cut.
		return out, &failure.Error{Type: failure.Network, Message: "the model's stream ended before the completion finished"}
	}
	return out, nil
}

// maxToolCalls bounds the tool calls of one reply.
const maxToolCalls = 64

// classify maps an error of a call to the endpoint into a *failure.Error
// (§ error mapping in docs/protocol.md): 429 → rate_limit with the
// Retry-After the server gave; 5xx and connection errors → network; a
// deadline or 408 → timeout; other 4xx → permanent. Its Message, which
// clients see, says what happened in Baton's words and the HTTP status;
// the endpoint's address, its reply's body (which may quote the key) and
// the transport's error stay in Err, for the log. When ctx itself is done,
// ctx's error is returned as it is.
func classify(ctx context.Context, err error, retryAfter time.Duration) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ctx.Err()
	}
	status := 0
	var apiErr *goopenai.APIError
	var reqErr *goopenai.RequestError
	switch {
	case errors.As(err, &apiErr):
		status = apiErr.HTTPStatusCode
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
	}
	typ := failure.Network
	switch {
	case errors.Is(err, errResponseTooLong):
		typ = failure.Validation
	case errors.Is(err, context.DeadlineExceeded), status == http.StatusRequestTimeout:
		typ = failure.Timeout
	case status == http.StatusTooManyRequests:
		typ = failure.RateLimit
	case status >= 500:
		typ = failure.Network
	case status >= 400:
		typ = failure.Permanent
	}
	fe := &failure.Error{Type: typ, Err: err, Message: describe(err, status, typ)}
	if typ == failure.RateLimit {
		fe.RetryAfter = retryAfter
	}
	return fe
}

// describe is the client-safe message of a failed call: what happened and
// the HTTP status, never the endpoint's own words.
func describe(err error, status int, typ string) string {
	if status != 0 {
		what := "refused the request"
		switch {
		case status == http.StatusTooManyRequests:
			what = "is limiting requests"
		case status == http.StatusRequestTimeout:
			what = "timed out"
		case status >= 500:
			what = "failed"
		}
		return fmt.Sprintf("the model endpoint %s: %d %s", what, status, strings.ToLower(http.StatusText(status)))
	}
	var ne net.Error
	switch {
	case errors.Is(err, errResponseTooLong):
		return errResponseTooLong.Error()
	case typ == failure.Timeout:
		return "the model endpoint did not answer in time"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection to the model endpoint broke"
	case errors.As(err, &ne):
		return "the model endpoint could not be reached"
	}
	return "the model endpoint's reply could not be read"
}

// retryAfter receives the Retry-After of a 429 response; go-openai's
// errors do not carry headers, so the transport records it here.
type retryAfter struct{ d time.Duration }

type retryAfterKey struct{}

// retryAfterTransport records Retry-After into the slot carried by the
// request's context, and bounds every response's body to maxBody bytes.
// RoundTrip runs on the caller's goroutine, so the slot needs no lock.
type retryAfterTransport struct {
	base    http.RoundTripper
	maxBody int64
}

func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		if slot, ok := req.Context().Value(retryAfterKey{}).(*retryAfter); ok {
			slot.d = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		}
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: t.maxBody}
	return resp, nil
}

// errResponseTooLong is a read of a response body past MaxResponseBytes.
var errResponseTooLong = errors.New("the model endpoint's reply is longer than Baton reads")

// limitedBody is a response body that fails with errResponseTooLong
// rather than give more than left bytes.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errResponseTooLong
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP
// date. 0 when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil && secs >= 0 {
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// coalescer turns a stream of small pieces of text into reports at most
// once per interval, each carrying the text since the previous report.
type coalescer struct {
	interval time.Duration
	now      func() time.Time
	emit     func(text string)
	pending  strings.Builder
	last     time.Time
}

func (c *coalescer) add(text string) {
	c.pending.WriteString(text)
	if now := c.now(); now.Sub(c.last) >= c.interval {
		c.last = now
		c.flush()
	}
}

// flush reports whatever is pending.
func (c *coalescer) flush() {
	if c.pending.Len() > 0 {
		c.emit(c.rest())
	}
}

// rest returns the text not reported yet and forgets it.
func (c *coalescer) rest() string {
	s := c.pending.String()
	c.pending.Reset()
	return s
}
