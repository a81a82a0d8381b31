package mcptool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/baton-run/baton/tool"
)

// Options configures a Manager. The zero value gives the defaults.
type Options struct {
	// Confirm names the servers whose every tool asks the user before each
	// call (--mcp-confirm NAME). A name that is not among the specs is an
	// error, so that a misspelt name cannot silently drop the confirmation.
	Confirm []string
	// Trust names the servers whose tools run without asking, whatever
	// their annotations say (--mcp-trust NAME). Without it a tool asks
	// first unless it is annotated readOnlyHint:true, as the MCP
	// specification's defaults say (readOnlyHint false, destructiveHint
	// true). A name that is not among the specs, or is also in Confirm, is
	// an error.
	Trust []string
	// Logger receives the servers' starts, exits and restarts, skipped
	// tools, and each line a server writes to its stderr (at info level).
	// Defaults to discarding everything.
	Logger *slog.Logger
	// StartTimeout bounds starting one server: running its command, the MCP
	// handshake and, at startup, listing its tools. Defaults to 30 seconds
	// (npx may download the server the first time).
	StartTimeout time.Duration
	// RestartBackoff is how long a server that keeps failing stays down
	// before the next attempt: after its second failure in a row (a failed
	// start, or an exit within 10 seconds of its start while no call was
	// in progress), doubling with each further one. A server that stops
	// during a call is blamed on the call, not counted: the next call
	// starts it again at once. Defaults to 1 second.
	RestartBackoff time.Duration
	// MaxRestartBackoff caps the wait between restarts. Defaults to 1
	// minute.
	MaxRestartBackoff time.Duration
	// StopTimeout is how long a server may take to exit once its stdin is
	// closed before it is sent SIGTERM, and again before SIGKILL. Defaults
	// to 2 seconds.
	StopTimeout time.Duration
	// MaxDescription bounds a tool's description in bytes; a longer one is
	// cut. Defaults to 1024.
	MaxDescription int
	// MaxSchema bounds a tool's input schema, in bytes of JSON; a tool with
	// a larger one is not offered. Defaults to 16 KiB.
	MaxSchema int
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 30 * time.Second
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = time.Second
	}
	if o.MaxRestartBackoff <= 0 {
		o.MaxRestartBackoff = time.Minute
	}
	o.MaxRestartBackoff = max(o.MaxRestartBackoff, o.RestartBackoff)
	if o.StopTimeout <= 0 {
		o.StopTimeout = 2 * time.Second
	}
	if o.MaxDescription <= 0 {
		o.MaxDescription = 1024
	}
	if o.MaxSchema <= 0 {
		o.MaxSchema = 16 << 10
	}
	return o
}

// A Manager runs the MCP servers of one Baton process and offers their
// tools. Its methods and its tools' methods may be called concurrently.
type Manager struct {
	opts    Options
	servers []*server
	tools   []tool.Tool

	// ctx is cancelled by Close; it ends restarts in progress.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts every goroutine the package starts: process waiters,
	// session monitors and restarts.
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start starts a server for each spec, all at once, and lists their tools.
// It fails, and leaves nothing running, when a spec or option is invalid or
// a server cannot be started, does not complete the MCP handshake within
// Options.StartTimeout, or cannot list its tools. ctx bounds only the
// start; the servers run until Close.
func Start(ctx context.Context, specs []Spec, opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	names := make(map[string]bool, len(specs))
	for _, spec := range specs {
		if err := checkName(spec.Name); err != nil {
			return nil, fmt.Errorf("mcp server %q: %w", spec.Name, err)
		}
		if spec.Command == "" {
			return nil, fmt.Errorf("mcp server %q: no command", spec.Name)
		}
		if names[spec.Name] {
			return nil, fmt.Errorf("mcp server %q: given twice", spec.Name)
		}
		names[spec.Name] = true
	}
	confirm := make(map[string]bool, len(opts.Confirm))
	for _, name := range opts.Confirm {
		if !names[name] {
			return nil, fmt.Errorf("--mcp-confirm %q: no MCP server of that name", name)
		}
		confirm[name] = true
	}
	trust := make(map[string]bool, len(opts.Trust))
	for _, name := range opts.Trust {
		switch {
		case !names[name]:
			return nil, fmt.Errorf("--mcp-trust %q: no MCP server of that name", name)
		case confirm[name]:
			return nil, fmt.Errorf("--mcp-trust %q: also in --mcp-confirm; a server is either asked for or trusted", name)
		}
		trust[name] = true
	}

	m := &Manager{opts: opts}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, spec := range specs {
		log := opts.Logger.With("mcp_server", spec.Name)
		m.servers = append(m.servers, &server{
			m:          m,
			spec:       spec,
			confirmAll: confirm[spec.Name],
			trusted:    trust[spec.Name],
			log:        log,
			client:     newClient(log),
		})
	}
	errs := make([]error, len(m.servers))
	var starts sync.WaitGroup
	for i, s := range m.servers {
		starts.Go(func() { errs[i] = s.start(ctx) })
	}
	starts.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = m.Close()
		return nil, err
	}
	for _, s := range m.servers {
		m.tools = append(m.tools, s.tools...)
	}
	return m, nil
}

// newClient returns the MCP client of one server (its sessions follow one
// another, one per process).
func newClient(log *slog.Logger) *mcp.Client {
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		version = bi.Main.Version
	}
	return mcp.NewClient(&mcp.Implementation{Name: "baton", Version: version}, &mcp.ClientOptions{
		Logger: log,
		// Baton serves no roots, sampling or elicitation. (The SDK would
		// advertise roots by default, and a filesystem server would then
		// ask for them instead of using its arguments.)
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			log.Debug("mcp server's tool list changed; the tools offered stay those listed at startup")
		},
	})
}

// Tools returns the tools of every server, server by server in the order
// of the specs, each server's in the order it listed them.
func (m *Manager) Tools() []tool.Tool {
	return append([]tool.Tool(nil), m.tools...)
}

// Close stops every server process (see Options.StopTimeout) and returns
// once they and every goroutine of the Manager have ended. A call in
// progress fails. Close may be called more than once.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.cancel()
		var stops sync.WaitGroup
		for _, s := range m.servers {
			stops.Go(s.close)
		}
		stops.Wait()
		m.wg.Wait()
	})
	return nil
}
